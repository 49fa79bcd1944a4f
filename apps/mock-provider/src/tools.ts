import { contentToText, isRecord } from './content.js';

/**
 * Deterministic tool use, so that a client's tool round trip can be checked
 * end to end: when a request offers tools (and does not forbid them) and its
 * last message is the user's, the answer calls a tool with arguments made from
 * the tool's JSON schema (strings get the user's words); when the last message
 * is a tool's result, the answer is `Echo: <that result>`.
 */

export interface ToolCall {
  name: string;
  /** The arguments as an object (Anthropic `input`); OpenAI sends `JSON.stringify` of it. */
  args: Record<string, unknown>;
}

/** A JSON value for a schema, with `text` for every string in it. */
export function valueForSchema(schema: unknown, text: string, depth = 0): unknown {
  if (!isRecord(schema) || depth > 8) return text;
  const type: unknown = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  switch (type) {
    case 'object': {
      const properties = isRecord(schema.properties) ? schema.properties : {};
      return Object.fromEntries(
        Object.entries(properties).map(([name, sub]) => [name, valueForSchema(sub, text, depth + 1)]),
      );
    }
    case 'array':
      return [valueForSchema(schema.items, text, depth + 1)];
    case 'number':
    case 'integer':
      return 42;
    case 'boolean':
      return true;
    case 'null':
      return null;
    default:
      return text;
  }
}

/** Which tool the answer calls, if any: `tools` as `{ name, schema }`, `choice` normalised to none / any / a name. */
export function chooseTool(
  tools: Array<{ name: string; schema: unknown }>,
  choice: 'auto' | 'none' | 'required' | { name: string },
  userText: string,
): ToolCall | undefined {
  if (tools.length === 0 || choice === 'none') return undefined;
  const tool = typeof choice === 'object' ? (tools.find((t) => t.name === choice.name) ?? tools[0]) : tools[0];
  const args = valueForSchema(tool.schema ?? { type: 'object', properties: {} }, userText);
  return { name: tool.name, args: isRecord(args) ? args : { value: args } };
}

/** OpenAI chat: `tools` and `tool_choice` as the request has them. */
export function openAITools(body: Record<string, unknown>): Array<{ name: string; schema: unknown }> {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools.flatMap((t) =>
    isRecord(t) && isRecord(t.function) && typeof t.function.name === 'string'
      ? [{ name: t.function.name, schema: t.function.parameters }]
      : [],
  );
}

export function openAIChoice(value: unknown): 'auto' | 'none' | 'required' | { name: string } {
  if (value === 'none' || value === 'required') return value;
  if (isRecord(value) && isRecord(value.function) && typeof value.function.name === 'string')
    return { name: value.function.name };
  return 'auto';
}

/** The text of the last message when it is a tool's result (OpenAI `tool` role, Anthropic `tool_result` block). */
export function lastToolResult(messages: readonly unknown[]): string | undefined {
  const last = messages[messages.length - 1];
  if (!isRecord(last)) return undefined;
  if (last.role === 'tool') return contentToText(last.content);
  if (last.role === 'user' && Array.isArray(last.content)) {
    const results = last.content.filter((b) => isRecord(b) && b.type === 'tool_result');
    if (results.length === 0) return undefined;
    return results.map((b) => contentToText((b as Record<string, unknown>).content)).join('\n');
  }
  return undefined;
}
