// A shared link's page (/share/<token>): the site's overview, read-only, every read with the link's token.
import { setShareToken } from './api.js'
import { renderOverview } from './overview.js'

const token = decodeURIComponent(location.pathname.split('/')[2] || '')
setShareToken(token)
renderOverview(document.getElementById('view'), document.body.dataset.siteId, { shared: { domain: document.body.dataset.domain } })
