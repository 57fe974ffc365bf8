// Thin fetch wrapper for the dashboard's same-origin JSON API.
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`)
    this.status = status
    this.body = body
  }
}

// On a shared link's page (/share/<token>) every read carries the link's token instead of a session.
let shareToken = null

export function setShareToken(token) {
  shareToken = token
}

function signIn() {
  location.assign('/login?next=' + encodeURIComponent(location.pathname + location.search))
}

export async function api(path, options = {}) {
  return (await apiResponse(path, options)).body
}

// The body and the response's headers (a list's X-Total-Count).
export async function apiResponse(path, { method = 'GET', json, form, signal } = {}) {
  const init = { method, headers: { Accept: 'application/json' }, signal, credentials: 'same-origin' }
  if (json !== undefined) {
    init.headers['Content-Type'] = 'application/json'
    init.body = JSON.stringify(json)
  } else if (form !== undefined) {
    init.body = new URLSearchParams(form)
  }
  if (shareToken) path += (path.includes('?') ? '&' : '?') + 'auth=' + encodeURIComponent(shareToken)
  const resp = await fetch(path, init)
  if (resp.status === 401 && !shareToken) {
    signIn()
    throw new ApiError(401, { error: 'unauthorized' })
  }
  const text = await resp.text()
  let body = null
  try {
    body = text ? JSON.parse(text) : null
  } catch (e) {
    body = { error: text }
  }
  if (!resp.ok) throw new ApiError(resp.status, body)
  return { body, headers: resp.headers }
}

// A query string from an object, skipping empty values; an array value repeats its parameter.
export function qs(params) {
  const out = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) {
    for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined && one !== null && one !== '') out.append(k, one)
  }
  return out.toString()
}
