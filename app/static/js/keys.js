// API keys of the workspace: create (the value is shown once), list, revoke.
import { api } from './api.js'
import { codeBlock, errorBox, h, replaceKeepingFocus, when, whileBusy } from './dom.js'

const COLUMNS = ['Name', 'Key', 'Scopes', 'Env', 'Created', 'Status', '']

function keyRow(key, reload) {
  const revoke = h('button', { type: 'button', class: 'small danger', text: 'Revoke' })
  revoke.addEventListener('click', async () => {
    if (revoke.dataset.confirm !== 'yes') {
      revoke.dataset.confirm = 'yes'
      revoke.textContent = 'Confirm revoke'
      return
    }
    // Busy, not disabled: a disabled button drops the keyboard's focus to the page before the list redraws.
    if (revoke.getAttribute('aria-disabled') === 'true') return
    revoke.setAttribute('aria-disabled', 'true')
    try {
      await api(`/api/keys/${encodeURIComponent(key.id)}`, { method: 'DELETE' })
      reload()
    } catch (e) {
      revoke.textContent = `Failed: ${e.message}`
      revoke.removeAttribute('aria-disabled')
    }
  })
  // Each cell names its column (data-label): on a phone the rows stack as cards (app.css) and show it.
  const cell = (label, attrs, ...children) => h('td', { ...attrs, dataset: { label } }, ...children)
  return h('tr', { dataset: { key: key.id } },
    cell(COLUMNS[0], { class: 'ellipsis', text: key.name }),
    cell(COLUMNS[1], { class: 'mono ellipsis', text: key.prefix + '…' }),
    cell(COLUMNS[2], { text: key.scopes.join(', ') }),
    cell(COLUMNS[3], {}, h('span', { class: key.env === 'live' ? 'badge ok' : 'badge', text: key.env })),
    cell(COLUMNS[4], { class: 'nowrap', text: when(key.createdAt) }),
    cell(COLUMNS[5], {}, h('span', { class: key.status === 'active' ? 'badge ok' : 'badge off', text: key.status })),
    cell(COLUMNS[6], {}, key.status === 'active' ? revoke : ''),
  )
}

export function renderKeys(container) {
  const created = h('div')
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  const list = h('div')
  const scope = (name, checked) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'scope', value: name, checked }), name)
  const form = h('form', { class: 'key-form' },
    h('label', {}, 'Name ', h('input', { name: 'name', required: true, maxlength: 64, placeholder: 'e.g. backend server' })),
    h('fieldset', { class: 'row' }, h('legend', { text: 'Scopes' }), scope('read', true), scope('write', true), scope('admin', false)),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'test' }), 'Test environment key (tally_test_…, sees only test data)'),
    h('button', { type: 'submit', class: 'primary', text: 'Create key' }))

  // Each reload supersedes the ones before it: a slow list left behind (the page's first, answered after a key
  // was created or revoked) is dropped, not drawn over the newer one.
  let generation = 0
  async function reload() {
    const mine = ++generation
    try {
      const { keys } = await api('/api/keys')
      if (mine !== generation) return
      if (!keys.length) {
        list.replaceChildren(h('p', { class: 'empty', text: 'No API keys yet. Create one above to send events from a server with POST /v1/events.' }))
        return
      }
      replaceKeepingFocus(list, [h('div', { class: 'table-wrap' }, h('table', { class: 'keys' },
        // The last column holds each key's Revoke button: its heading is for screen readers only.
        h('thead', {}, h('tr', {}, COLUMNS.map((t) => h('th', {}, t || h('span', { class: 'visually-hidden', text: 'Actions' }))))),
        h('tbody', {}, keys.map((k) => keyRow(k, reload)))))], () => list.querySelector('button') || form.querySelector('input[name=name]'))
    } catch (e) {
      if (mine === generation) list.replaceChildren(errorBox(e))
    }
  }

  const submit = form.querySelector('button[type=submit]')
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    whileBusy(submit, async () => {
      error.hidden = true
      const scopes = [...form.querySelectorAll('input[name=scope]:checked')].map((i) => i.value)
      try {
        const key = await api('/api/keys', { method: 'POST', json: { name: form.name.value.trim(), scopes, test: form.test.checked } })
        form.reset()
        created.replaceChildren(h('section', { class: 'card notice', role: 'status' },
          h('h2', { text: `Key “${key.name}” created` }),
          h('p', { text: 'Copy it now: this is the only time it is shown. Store it as a secret; send it as Authorization: Bearer <key>.' }),
          codeBlock(key.key),
          h('button', { type: 'button', class: 'small', text: 'Done, hide it', onclick: () => created.replaceChildren() })))
        reload()
      } catch (e) {
        error.textContent = e.status === 400 ? 'Give the key a name and at least one scope.' : `Could not create the key: ${e.message}`
        error.hidden = false
      }
    })
  })

  container.append(
    h('div', { class: 'page-head' }, h('h1', { text: 'API keys' }),
      h('p', { class: 'muted', text: 'Keys authenticate the /v1 REST API from your servers. The browser tracker needs no key.' })),
    created,
    h('section', { class: 'card' }, h('h2', { text: 'Create a key' }), form, error),
    h('section', { class: 'card' }, h('h2', { text: 'Keys' }), list),
  )
  reload()
}
