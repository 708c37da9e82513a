// Node 20 has no fs.globSync, which the conformance suite imports by name
// from "fs": this loader hook serves it a node:fs with globSync added.
import { register } from 'node:module';

register('./shim.mjs', import.meta.url);

const wrapper = new URL('./fsglob.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL !== wrapper) {
    return { url: wrapper, shortCircuit: true };
  }
  return next(specifier, context);
}
