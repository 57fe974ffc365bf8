// Goal management inside the Goals panel: list, add and remove a site's goals through
// GET/POST/DELETE /api/sites/{id}/goals (Plausible's Sites-API fields).
import { api } from './api.js'
import { errorBox, h, replaceKeepingFocus, whileBusy } from './dom.js'

export function goalManager(siteId, onChange) {
  const base = `/api/sites/${encodeURIComponent(siteId)}/goals`
  const list = h('ul', { class: 'goal-list' })
  const error = h('p', { class: 'error small', role: 'alert', hidden: true })
  const type = h('select', { 'aria-label': 'Goal type', name: 'goal_type' },
    h('option', { value: 'event', text: 'Custom event' }), h('option', { value: 'page', text: 'Page visit' }))
  const value = h('input', { 'aria-label': 'Event name or page path', name: 'goal_value', placeholder: 'signup', autocomplete: 'off' })
  type.addEventListener('change', () => { value.placeholder = type.value === 'page' ? '/thanks/**' : 'signup' })
  const form = h('form', { class: 'row goal-form' }, type, value, h('button', { type: 'submit', class: 'small primary', text: 'Add goal' }))

  // Each refresh supersedes the ones before it: a slow list left behind (the manager's first, answered after a
  // goal was added or removed) is dropped, not drawn over the newer one.
  let generation = 0
  async function refresh() {
    const mine = ++generation
    try {
      const { goals } = await api(base)
      if (mine !== generation) return
      // With none, the panel under this box already says so (and what a goal is): no second message here.
      replaceKeepingFocus(list, goals.map((g) => h('li', { class: 'row', dataset: { goal: g.id } },
        h('span', { class: 'badge', text: g.goal_type === 'page' ? 'page' : 'event' }),
        h('span', { class: 'ellipsis', text: g.goal_type === 'page' ? g.page_path : g.event_name }),
        h('span', { class: 'spacer' }),
        h('button', { type: 'button', class: 'link danger small', text: 'Remove', 'aria-label': `Remove goal ${g.display_name}`,
          onclick: (event) => whileBusy(event.currentTarget, async () => {
            try {
              await api(`${base}/${encodeURIComponent(g.id)}`, { method: 'DELETE' })
              await refresh()
              onChange()
            } catch (e) {
              show(e)
            }
          }) }))), () => list.querySelector('button') || value)
    } catch (e) {
      if (mine === generation) list.replaceChildren(errorBox(e))
    }
  }

  function show(e) {
    const issues = (e.body && e.body.issues) || []
    error.textContent = issues.length ? issues.map((i) => `${i.field.replace('_', ' ')} ${i.message}`).join('; ') : `Could not save: ${e.message}`
    error.hidden = false
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    error.hidden = true
    const text = value.value.trim()
    if (!text) return
    const json = type.value === 'page' ? { goal_type: 'page', page_path: text } : { goal_type: 'event', event_name: text }
    try {
      await api(base, { method: 'POST', json })
      value.value = ''
      await refresh()
      onChange()
    } catch (e) {
      show(e)
    }
  })
  refresh()
  return h('div', {}, list, form, error)
}
