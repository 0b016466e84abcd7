// Parses moenda's AsyncAPI document (the file named on the command line,
// or standard input) with the AsyncAPI project's own parser. It prints
// the errors and warnings, counts the rest (hints such as "a newer
// AsyncAPI version exists"), and exits 1 when any diagnostic is an error
// or the document does not parse.
import { readFileSync } from 'node:fs';
import { Parser, DiagnosticSeverity } from '@asyncapi/parser';

const source = readFileSync(process.argv[2] ?? 0, 'utf8');
const { document, diagnostics } = await new Parser().parse(source);

const shown = { [DiagnosticSeverity.Error]: 'error', [DiagnosticSeverity.Warning]: 'warning' };
let errors = 0;
let others = 0;
for (const d of diagnostics) {
  if (d.severity === DiagnosticSeverity.Error) errors++;
  if (!(d.severity in shown)) {
    others++;
    continue;
  }
  console.log(`${shown[d.severity]}: ${d.code}: ${d.message} at ${d.path.join('.') || '(document)'}`);
}
if (!document || errors > 0) {
  console.error(`asyncapi: ${errors} error(s)${document ? '' : '; the document did not parse'}`);
  process.exit(1);
}
console.log(`asyncapi: valid AsyncAPI ${document.version()}, ${document.channels().length} channels, ` +
  `${document.operations().length} operations, ${document.messages().length} messages (${others} hints or notes not shown)`);
