// Thin fetch wrapper for the dashboard's same-origin JSON API.
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`)
    this.status = status
    this.body = body
  }
}

// What a user sees when a request gets no answer at all (the server down, the network gone): the browser's
// own words for it are "Failed to fetch" (a TypeError), which say nothing to a site owner.
export const UNREACHABLE = "Can't reach the Tally server. Check your connection and try again."

// A request that got no answer: an ApiError of status 0 whose message is UNREACHABLE.
export function unreachable() {
  return new ApiError(0, { error: UNREACHABLE })
}

// A read that got no answer at all (server stopped, network gone), or a 503 (PostgreSQL away, the analytics
// store still mirroring a backlog after an upgrade), is tried again by itself every RETRY_MS, as realtime
// polls on, so a dashboard left open comes back once the server does.
export const RETRY_MS = 5000
export const retriesItself = (error) => !!error && (error.status === 0 || error.status === 503)

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
  let resp, text
  try {
    resp = await fetch(path, init)
    if (resp.status === 401 && !shareToken) {
      signIn()
      throw new ApiError(401, { error: 'unauthorized' })
    }
    text = await resp.text() // a connection lost half-way through the body fails here
  } catch (e) {
    // An abort the caller asked for (its signal) is not the server's absence.
    throw e instanceof ApiError || (e && e.name === 'AbortError') ? e : unreachable()
  }
  let body = null
  try {
    body = text ? JSON.parse(text) : null
  } catch (e) {
    // A proxy in front of a stopped Tally answers 502-504 with a page of its own: Tally was not reached.
    if (resp.status >= 502 && resp.status <= 504) throw unreachable()
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
