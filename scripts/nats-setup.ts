/**
 * `pnpm nats-setup --dir DIR`: the platform's NATS in operator mode, for a deployment that makes its secrets itself
 * (Kubernetes, deploy/k8s/README.md): writes the set-up into DIR (`writeNatsSetup`, the same files docker-compose's
 * auth and `pnpm start` write) and says what to do with each file. Run again on the same folder, it keeps the keys,
 * issues every service a new user and revokes the earlier ones.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { writeNatsSetup } from '../packages/common/src/messaging/nats-setup.ts';
import { answerHelp } from './lib/usage.ts';

answerHelp(`usage: pnpm nats-setup --dir DIR

Writes the platform's NATS set-up for a server in operator mode into DIR. The keys are made once and kept; each run
issues every service a new user and revokes the ones before, which the server refuses once it loads the new
accounts (a reload: the Helm chart's config reloader, or nats-server --signal reload):
  trust.json         every seed (operator, accounts, signing key): keep it offline, with users.json beside it
  issuer.json        auth's NATS_ISSUER_FILE: it signs provider daemons' users with it
  creds/*.creds      each service's own NATS user (NATS_CREDENTIALS of storage, provider-registry, billing)
  users.json         the services' users issued, and the earlier ones revoked (public keys): keep it with the rest
  server/nats-values.yaml   the NATS Helm chart's values for operator mode (public JWTs)
  server/accounts.conf      the same for a nats-server configuration file (include it)`);

const { values } = parseArgs({ options: { dir: { type: 'string' } } });
if (!values.dir) {
  process.stderr.write('pnpm nats-setup: --dir names the folder to write into\n');
  process.exit(2);
}
const dir = path.resolve(values.dir);
const setup = await writeNatsSetup(dir);
process.stdout.write(
  [
    `wrote the platform's NATS set-up in ${dir} (keys kept in ${setup.trust}: keep that file offline)`,
    'Kubernetes (deploy/k8s/README.md, "NATS in operator mode"):',
    `  kubectl create secret generic nats-issuer --from-file=issuer.json=${setup.issuer} --dry-run=client -o yaml | kubectl apply -f -`,
    `  kubectl create secret generic nats-creds --from-file=${path.join(dir, 'creds')} --dry-run=client -o yaml | kubectl apply -f -`,
    '  (run again: wait until the pods see the new creds, a minute or two, then upgrade the chart; it revokes the earlier users)',
    `  helm upgrade --install nats nats/nats -f deploy/k8s/dependencies/nats/values.yaml -f ${setup.helmValues}`,
    '',
  ].join('\n'),
);
