// Time-series chart on uPlot (vendored in /static/vendor), resized with its container.
import { h } from './dom.js'

// The API's buckets are the site's hours and days (its time zone, UTC by default), so the chart is drawn and
// labelled in that zone: in the browser's own, a day's point sat between two local midnights, and a UTC site's
// legend in New York dated today's traffic yesterday 7pm.

// `previous`: the comparison period's points, drawn dashed over the same x positions. `zone`: the site's.
export function timeChart(points, label, previous = null, zone = 'UTC') {
  const box = h('div', { class: 'chart' })
  if (!window.uPlot) {
    box.append(h('p', { class: 'muted', text: 'Chart library failed to load.' }))
    return { el: box, destroy() {} }
  }
  const xs = points.map((p) => new Date(p.timestamp).getTime() / 1000)
  const ys = points.map((p) => p.value)
  const css = getComputedStyle(document.documentElement)
  const accent = css.getPropertyValue('--accent').trim() || '#4f46e5'
  const opts = {
    tzDate: (ts) => window.uPlot.tzDate(new Date(ts * 1000), zone),
    width: 600,
    height: 220,
    legend: { show: true, live: true },
    cursor: { drag: { x: false, y: false } },
    scales: { y: { range: (u, min, max) => [0, Math.max(1, max) * 1.1] } },
    axes: [{ stroke: '#6b7280', grid: { stroke: '#eef0f4' } },
      { stroke: '#6b7280', grid: { stroke: '#eef0f4' }, size: 50, values: (u, vals) => vals.map((v) => (Number.isInteger(v) ? v : '')) }],
    // The legend's time is the point's own label from the API ("Nov 28", "Nov 28 14:00", "14:05").
    series: [{ label: `Time (${zone})`, value: (u, ts, sidx, idx) => (idx !== null && points[idx] ? points[idx].label || '' : '--') },
      { label, stroke: accent, width: 2, fill: accent + '22', points: { show: points.length < 50 } }],
  }
  const data = [xs, ys]
  if (previous) {
    opts.series.push({ label: 'Previous period', stroke: '#9ca3af', width: 1.5, dash: [6, 4], points: { show: false } })
    data.push(xs.map((x, i) => (previous[i] ? previous[i].value : null)))
  }
  const plot = new window.uPlot(opts, data, box)
  const resize = () => {
    const width = Math.max(240, box.clientWidth)
    if (width !== plot.width) plot.setSize({ width, height: width < 500 ? 180 : 220 })
  }
  const observer = new ResizeObserver(resize)
  observer.observe(box)
  // Said under the chart too: the legend, which names the zone, is hidden on phones.
  const el = h('div', { class: 'chart-wrap' }, box, h('p', { class: 'muted small chart-zone', text: `Times in ${zone}` }))
  return { el, destroy() { observer.disconnect(); plot.destroy() } }
}
