/**
 * Bounds on the label values a client's request can put into the metrics
 * (model names, hashed tenants): each value short and plain, and few of them.
 * Prometheus keeps every distinct series in memory for hours; one request
 * must not add a 100 KB label, nor many requests thousands of series.
 */

/** Distinct model names labelled, per port (past this: `other`). */
export const MAX_MODEL_LABELS = 50;
/** Distinct hashed tenants labelled with `--metrics-tenants`, per port (past this: `other`). */
export const MAX_TENANT_LABELS = 50;
/** Longest label value taken from a request (a model name); longer ones are `other`. */
export const MAX_LABEL_CHARS = 64;
/** The value every label past its bounds takes. */
export const OTHER = 'other';

// Model names as providers spell them (`gpt-4o-mini`, `meta-llama/Llama-3.1-8B`, `llama3.2:3b`, `org@model+v2`).
const PLAIN = /^[A-Za-z0-9][\w.:/@+-]*$/;

/** The value itself when it is short and plain, else `other`. */
export function plainLabel(value: string): string {
  return value.length <= MAX_LABEL_CHARS && PLAIN.test(value) ? value : OTHER;
}

/** Distinct label values up to a cap, each plain (see `plainLabel`); later ones become `other`. */
export class CappedLabels {
  private readonly seen = new Set<string>();
  constructor(private readonly max: number) {}

  of(value: string): string {
    if (this.seen.has(value)) return value;
    const plain = plainLabel(value);
    if (plain === OTHER || this.seen.size >= this.max) return OTHER;
    this.seen.add(plain);
    return plain;
  }
}

/** The labels capped across a port's workers (each worker caps its own; the port's scrape caps their union). */
export const PORT_CAPPED_LABELS: Readonly<Record<string, number>> = {
  model: MAX_MODEL_LABELS,
  tenant: MAX_TENANT_LABELS,
};

interface MetricPart {
  name: string;
  values?: Array<{ labels?: Record<string, string | number> }>;
}

/**
 * The workers' metrics (prom-client's `get()` of each) with the capped labels
 * of the gateway's own metrics bounded for the port: the first values met
 * keep their name, the rest become `other` (summed with it by the
 * aggregation that follows).
 */
export function capPortLabels<T extends MetricPart>(lists: T[][]): T[][] {
  const seen = new Map<string, Set<string>>();
  const bound = (label: string, value: string): string => {
    const max = PORT_CAPPED_LABELS[label];
    let values = seen.get(label);
    if (!values) seen.set(label, (values = new Set()));
    if (values.has(value) || value === OTHER) return value;
    if (values.size >= max) return OTHER;
    values.add(value);
    return value;
  };
  return lists.map((metrics) =>
    metrics.map((metric) => {
      if (!metric.name.startsWith('gateway_') || !metric.values) return metric;
      let changed = false;
      const values = metric.values.map((v) => {
        if (!v.labels) return v;
        let labels = v.labels;
        for (const label in PORT_CAPPED_LABELS) {
          const value = labels[label];
          if (value === undefined) continue;
          const capped = bound(label, String(value));
          if (capped !== value) {
            labels = { ...labels, [label]: capped };
            changed = true;
          }
        }
        return labels === v.labels ? v : { ...v, labels };
      });
      return changed ? { ...metric, values } : metric;
    }),
  );
}
