// Sign-in form: POST /api/auth/login, then go to the page that sent us here (only inside /app).
const form = document.getElementById('login-form')
const error = document.getElementById('login-error')

function target() {
  const next = new URLSearchParams(location.search).get('next') || ''
  return next.startsWith('/app') && !next.startsWith('//') ? next : '/app'
}

form.addEventListener('submit', async (event) => {
  event.preventDefault()
  error.hidden = true
  const button = form.querySelector('button')
  button.disabled = true
  try {
    const resp = await fetch('/api/auth/login', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ email: form.email.value, password: form.password.value }),
    })
    if (resp.ok) {
      location.assign(target())
      return
    }
    const body = await resp.json().catch(() => ({}))
    error.textContent = resp.status === 429 ? 'Too many attempts. Wait a minute and try again.'
      : body.error === 'invalid payload' ? 'Enter your email and password.'
      : resp.status === 401 ? 'Wrong email or password.'
      // A server error (the database down: 503) says nothing about the password.
      : `The server could not sign you in (HTTP ${resp.status}). Try again in a moment.`
    error.hidden = false
  } catch (e) {
    error.textContent = "Can't reach the Tally server. Check your connection and try again."
    error.hidden = false
  } finally {
    button.disabled = false
  }
})
