// Sends one of each Segment call through @segment/analytics-node, unchanged, to the host given.
// Usage: node send.mjs <host> <writeKey> <prefix>   (tests/test_segment_sdks.py runs it)
import { Analytics } from '@segment/analytics-node'

const [host, writeKey, prefix] = process.argv.slice(2)
const analytics = new Analytics({ writeKey, host, flushAt: 50, flushInterval: 60000, maxRetries: 5 })
const failures = []
analytics.on('error', (err) => failures.push(String(err && (err.reason || err.code || err))))

const user = `${prefix}-user`
const anon = `${prefix}-anon`
analytics.track({ anonymousId: anon, event: 'Product Viewed', properties: { sku: 'A1' } })
analytics.identify({ userId: user, traits: { email: `${prefix}@example.com`, plan: 'pro' } })
analytics.track({ userId: user, event: 'Order Completed', properties: { total: 42.5, currency: 'EUR' } })
analytics.page({ userId: user, category: 'Docs', name: 'Pricing', properties: { path: '/pricing' } })
analytics.group({ userId: user, groupId: 'acme', traits: { name: 'Acme Inc', seats: 12 } })
analytics.alias({ previousId: anon, userId: user })
await analytics.closeAndFlush({ timeout: 60000 })
if (failures.length) {
  console.error(JSON.stringify(failures))
  process.exit(1)
}
console.log('sent')
