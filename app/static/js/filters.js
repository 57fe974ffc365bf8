// Filters of a site's pages as the API spells them (repeated `filter=dimension==value` terms), kept in
// the URL so that a filtered view can be shared and survives a reload; plus their removable chips.
import { h } from './dom.js'

// Display names of the dimensions a panel row can filter on.
export const DIMENSION_LABELS = {
  channel: 'Channel', source: 'Source', referrer: 'Referrer',
  utm_medium: 'UTM medium', utm_source: 'UTM source', utm_campaign: 'UTM campaign', utm_term: 'UTM term', utm_content: 'UTM content',
  page: 'Page', entry_page: 'Entry page', exit_page: 'Exit page',
  country: 'Country', region: 'Region', city: 'City',
  browser: 'Browser', browser_version: 'Browser version', os: 'OS', os_version: 'OS version', device: 'Size',
  goal: 'Goal', event: 'Event',
}
const OPS = { '==': 'is', '!=': 'is not', '~=': 'contains' }

// "dimension==value" -> {dimension, op, value}; null when it is not a term.
export function parseTerm(raw) {
  let best = null
  for (const op of Object.keys(OPS)) {
    const at = raw.indexOf(op)
    if (at > 0 && (best === null || at < best.at)) best = { at, op }
  }
  if (!best) return null
  return { dimension: raw.slice(0, best.at), op: best.op, value: raw.slice(best.at + 2) }
}

export function term(dimension, value, op = '==') {
  return `${dimension}${op}${value}`
}

// The filters with `dimension` set to `value` (one `is` term per dimension, as Plausible does).
export function withTerm(filters, dimension, value) {
  return [...filters.filter((f) => { const t = parseTerm(f); return !(t && t.dimension === dimension && t.op === '==') }),
    term(dimension, value)]
}

export function termValue(filters, dimension) {
  for (const f of filters) {
    const t = parseTerm(f)
    if (t && t.dimension === dimension && t.op === '==') return t.value
  }
  return null
}

const regionNames = typeof Intl.DisplayNames === 'function' ? new Intl.DisplayNames(['en'], { type: 'region' }) : null

// A country code as its English name ("DE" -> "Germany"); the code itself when unknown.
export function countryName(code) {
  try {
    return (regionNames && /^[A-Z]{2}$/.test(code) && regionNames.of(code)) || code
  } catch (e) {
    return code
  }
}

export function displayValue(dimension, value) {
  return dimension === 'country' ? countryName(value) : value
}

export function chipLabel(raw) {
  const t = parseTerm(raw)
  if (!t) return raw
  const name = t.dimension.startsWith('props:') ? `Property ${t.dimension.slice(6)}` : (DIMENSION_LABELS[t.dimension] || t.dimension)
  return `${name} ${OPS[t.op]} ${displayValue(t.dimension, t.value)}`
}

export function filterChips(filters, onRemove) {
  return filters.map((f) => h('span', { class: 'chip', dataset: { filter: f } },
    h('span', { class: 'ellipsis', title: chipLabel(f), text: chipLabel(f) }),
    h('button', { type: 'button', class: 'link', 'aria-label': `Remove filter ${chipLabel(f)}`, text: '×', onclick: () => onRemove(f) })))
}
