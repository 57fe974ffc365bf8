// A site's shared links, under its overview: create one, copy its URL, set or remove its password, revoke it
// (GET/POST/PATCH/DELETE /api/sites/{id}/shared-links). A link opens the overview read-only, without signing in.
import { api } from './api.js'
import { codeBlock, errorBox, h, replaceKeepingFocus, whileBusy } from './dom.js'

export function sharedLinks(siteId) {
  const base = `/api/sites/${encodeURIComponent(siteId)}/shared-links`
  const list = h('ul', { class: 'goal-list shared-list' })
  const error = h('p', { class: 'error small', role: 'alert', hidden: true })
  const name = h('input', { 'aria-label': 'Link name', name: 'link_name', placeholder: 'Name (optional)', autocomplete: 'off', maxlength: 64 })
  const password = h('input', { 'aria-label': 'Link password', name: 'link_password', type: 'password', placeholder: 'Password (optional)', autocomplete: 'new-password', minlength: 8, maxlength: 128 })
  const form = h('form', { class: 'row goal-form' }, name, password, h('button', { type: 'submit', class: 'small primary', text: 'New shared link' }))
  const el = h('details', { class: 'card shared-links' },
    h('summary', { text: 'Shared links' }),
    h('p', { class: 'muted small', text: 'Anyone with a link (and its password, when it has one) sees this overview, read-only, without signing in: not the event log, exports or settings. Revoking a link stops it at once.' }),
    list, form, error)

  function failed(e) {
    error.hidden = false
    error.textContent = (e && e.message) || String(e)
  }

  async function act(request) {
    try {
      await request()
      await refresh()
    } catch (e) {
      failed(e)
    }
  }

  // Set, change or remove a link's password: a new one ends the access the old one gave.
  function passwordForm(link, path) {
    const input = h('input', { type: 'password', name: 'new_link_password', 'aria-label': `New password for ${link.name}`, placeholder: 'New password', autocomplete: 'new-password', minlength: 8, maxlength: 128, required: true })
    const form = h('form', { class: 'row goal-form', hidden: true }, input,
      h('button', { type: 'submit', class: 'small', text: link.protected ? 'Change password' : 'Set password' }),
      ...(link.protected
        ? [h('button', { type: 'button', class: 'link small', text: 'Remove password', 'aria-label': `Remove password of ${link.name}`,
            onclick: () => act(() => api(path, { method: 'PATCH', json: { password: null } })) })]
        : []))
    form.addEventListener('submit', (e) => {
      e.preventDefault()
      act(() => api(path, { method: 'PATCH', json: { password: input.value } }))
    })
    return form
  }

  function linkItem(link) {
    const path = `${base}/${encodeURIComponent(link.id)}`
    const form = passwordForm(link, path)
    return h('li', { class: 'shared-link', dataset: { link: link.id } },
      h('div', { class: 'row' }, h('strong', { class: 'ellipsis', text: link.name }),
        ...(link.protected ? [h('span', { class: 'badge', text: 'password' })] : []), h('span', { class: 'spacer' }),
        h('button', { type: 'button', class: 'link small', text: 'Password', 'aria-label': `Password of ${link.name}`,
          onclick: () => { form.hidden = !form.hidden; if (!form.hidden) form.querySelector('input').focus() } }),
        h('button', { type: 'button', class: 'link danger small', text: 'Revoke', 'aria-label': `Revoke ${link.name}`,
          onclick: (event) => whileBusy(event.currentTarget, () => act(() => api(path, { method: 'DELETE' }))) })),
      codeBlock(link.url, 'Copy link'), form)
  }

  // Each refresh supersedes the ones before it: a slow list left behind (the one asked when the box opened,
  // answered after a link was created) is dropped, not drawn over the newer one.
  let generation = 0
  async function refresh() {
    const mine = ++generation
    try {
      const { links } = await api(base)
      if (mine !== generation) return
      error.hidden = true
      replaceKeepingFocus(list, [...(links.length ? [] : [h('li', { class: 'muted small', text: 'No shared links.' })]),
        ...links.map(linkItem)], () => list.querySelector('button') || name)
    } catch (e) {
      if (mine === generation) list.replaceChildren(errorBox(e))
    }
  }

  const submit = form.querySelector('button[type=submit]')
  form.addEventListener('submit', (e) => {
    e.preventDefault()
    whileBusy(submit, async () => {
      try {
        const body = {}
        if (name.value.trim()) body.name = name.value.trim()
        if (password.value) body.password = password.value
        await api(base, { method: 'POST', json: body })
        name.value = ''
        password.value = ''
        await refresh()
      } catch (err) {
        failed(err)
      }
    })
  })
  el.addEventListener('toggle', () => { if (el.open) refresh() })
  return el
}
