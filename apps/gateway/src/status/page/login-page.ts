// The sign-in form's script: posts the key to `<path>/login` and reloads the page once the session is set.
async function signIn(): Promise<void> {
  const key = (document.getElementById('key') as HTMLInputElement).value;
  const response = await fetch(location.pathname.replace(/\/$/, '') + '/login', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ key }),
  });
  if (response.ok) location.reload();
  else (document.getElementById('message') as HTMLElement).textContent = "That key is not one of this gateway's keys.";
}
(document.getElementById('login') as HTMLFormElement).addEventListener('submit', (event) => {
  event.preventDefault();
  void signIn();
});
