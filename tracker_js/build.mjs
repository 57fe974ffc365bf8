// Build the tracker with esbuild (pinned in package.json / package-lock.json).
//   dist/tally.min.js  script-tag build (IIFE, calls boot(window))
//   dist/tally.esm.js  ES module exporting createTracker
// Prints raw and gzipped sizes; exits non-zero if the script-tag build is
// over the 2 KB gzipped budget. The test suite imports bundles() to check
// that the committed dist/ matches the source.
import { build } from 'esbuild'
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import { gzipSync } from 'node:zlib'
import { fileURLToPath } from 'node:url'
import { dirname, join } from 'node:path'

const root = dirname(fileURLToPath(import.meta.url))
export const BUDGET = 2048
export const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version

const common = {
  bundle: true,
  minify: true,
  write: false,
  target: ['es2017'],
  legalComments: 'none',
  define: { __TALLY_VERSION__: JSON.stringify(version) },
  logLevel: 'warning',
}

// Returns { 'tally.min.js': string, 'tally.esm.js': string } without writing.
export async function bundles() {
  const iife = await build({
    ...common,
    stdin: {
      contents: "import { boot } from './src/tracker.js'; boot(window)",
      resolveDir: root,
      sourcefile: 'tally-script.js',
    },
    format: 'iife',
  })
  const esm = await build({
    ...common,
    entryPoints: [join(root, 'src/tracker.js')],
    format: 'esm',
  })
  return {
    'tally.min.js': iife.outputFiles[0].text,
    'tally.esm.js': esm.outputFiles[0].text,
  }
}

export const gzipSize = (text) => gzipSync(Buffer.from(text), { level: 9 }).length

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = await bundles()
  mkdirSync(join(root, 'dist'), { recursive: true })
  let over = false
  for (const [name, text] of Object.entries(out)) {
    writeFileSync(join(root, 'dist', name), text)
    const raw = Buffer.byteLength(text)
    const gz = gzipSize(text)
    console.log(`dist/${name}: ${raw} bytes raw, ${gz} bytes gzipped (budget ${BUDGET})`)
    if (gz > BUDGET) over = true
  }
  if (over) {
    console.error(`build failed: gzipped size over the ${BUDGET} byte budget`)
    process.exit(1)
  }
}
