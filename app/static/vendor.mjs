// Copies the browser builds of the dashboard's libraries from node_modules into vendor/.
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs'

const files = [
  ['node_modules/uplot/dist/uPlot.iife.min.js', 'vendor/uPlot.iife.min.js'],
  ['node_modules/uplot/dist/uPlot.min.css', 'vendor/uPlot.min.css'],
  ['node_modules/uplot/LICENSE', 'vendor/uPlot.LICENSE'],
]
mkdirSync('vendor', { recursive: true })
for (const [from, to] of files) copyFileSync(from, to)
const version = JSON.parse(readFileSync('node_modules/uplot/package.json', 'utf8')).version
console.log(`vendored uPlot ${version}`)
