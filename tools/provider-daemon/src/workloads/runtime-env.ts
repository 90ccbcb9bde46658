/**
 * A container's variables as its runtime takes them: a file of `NAME=value` lines (`--env-file`, kept off the command
 * line, which `ps` shows every user of the machine) wherever a line holds the value exactly as it is.
 *
 * The runtimes read that file line by line: a value with a line break would end its line and start another variable
 * (`A="x\nNVIDIA_VISIBLE_DEVICES=all"` set a name the platform sets, or a line with no `=` copied the runtime's own
 * variable), and newer Podman reads a value that starts with a quote as a quoted, possibly multi-line, one. Such values
 * go as `--env NAME=value` arguments instead, each one whole.
 */

/** Whether the runtimes' files keep `value` as it is on a `NAME=value` line. */
const lineSafe = (value: string) => !/[\r\n]/.test(value) && !/^["'`]/.test(value);

/** The file's text (possibly empty) and the arguments for the values it cannot hold. */
export function containerEnv(env: Record<string, string>): { file: string; args: string[] } {
  let file = '';
  const args: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (lineSafe(value)) file += `${name}=${value}\n`;
    else args.push('--env', `${name}=${value}`);
  }
  return { file, args };
}
