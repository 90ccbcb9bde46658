/**
 * The Kubernetes manifests in deploy/k8s, checked without a cluster: every document is validated against the
 * Kubernetes JSON schemas (kubernetes-models), every kustomization's paths exist, each overlay is rendered (base,
 * components, patches, replicas, images, namespace) and validated again, and the Deployments are checked against
 * the services themselves: the environment variable names each service understands (its zod schema and aliases),
 * the values (each service's own configuration loader must accept them), its port, health and metrics routes and
 * its shutdown bound. The gateway (deploy/k8s/gateway: Gateway API and Envoy Gateway resources, validated against
 * their schemas too) routes exactly the platform's route table (tools/gateway/src/routes.ts) with TLS, timeouts that
 * let long transfers run, no body buffering, operators-only health and a problem for any other path. Where kubectl is
 * installed, its kustomize must render each overlay as this test does.
 */
import { execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  auditDatabaseEnvAliases,
  baseEnvAliases,
  databaseEnvAliases,
  durationMs,
  fileCredentials,
  messagingEnvAliases,
  PLATFORM_NATS_USERS,
} from '@gpu/common';
import { freePort } from '@gpu/common/testing';
import {
  BackendTrafficPolicy,
  ClientTrafficPolicy,
  EnvoyProxy,
  HTTPRouteFilter,
  SecurityPolicy,
} from '@kubernetes-models/envoy-gateway/gateway.envoyproxy.io/v1alpha1';
import { Gateway, GatewayClass, HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { connect } from '@nats-io/transport-node';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Service } from 'kubernetes-models/v1/Service';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { authConfigSchema, authEnvAliases, checkAuthConfig, loadAuthConfig } from '../services/auth/src/config.ts';
import { billingConfigSchema, loadBillingConfig } from '../services/billing/src/config.ts';
import { loadRegistryConfig, registryConfigSchema } from '../services/provider-registry/src/config.ts';
import { loadStorageConfig, storageConfigSchema } from '../services/storage/src/config.ts';
import {
  bodyLimitOf,
  type Service as PlatformService,
  PORT_HOST,
  PORT_HOST_SERVICE,
  ROUTES,
  SERVICE_PORTS,
  UPLOAD_PREFIXES,
} from '../tools/gateway/src/routes.ts';
import { imageEnv } from './support/image-env.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const k8sDir = path.join(root, 'deploy/k8s');
const rel = (file: string) => path.relative(root, file);

// Manifests are free-form YAML: the checks below read them as loosely typed trees.
// biome-ignore lint/suspicious/noExplicitAny: parsed YAML documents, validated against the schemas below
type Doc = any;

// ---------------------------------------------------------------------------------------------------------------
// The services, as their code describes them.

/** A zod (4) schema, as far as this test reads it (the root package does not depend on zod). */
interface Schema {
  _zod: { def: unknown };
}

interface ServiceInfo {
  dir: string;
  prefix: string;
  schema: Schema;
  aliases: Record<string, string>;
  /** Other variables the service reads itself (its config file's name, NODE_ENV, APP_ENV...). */
  reads: Set<string>;
  load: (env: NodeJS.ProcessEnv) => Doc;
}

/** Exported alias maps of @gpu/common that a service's config.ts spreads into its own. */
const sharedAliases: Record<string, Record<string, string>> = {
  auditDatabaseEnvAliases,
  baseEnvAliases,
  databaseEnvAliases,
  messagingEnvAliases,
};

/**
 * The plain environment names a service's config.ts maps onto its keys: the `NAME: 'dotted.path'` entries of its
 * alias map and the shared maps it spreads (`...baseEnvAliases`). Storage, registry and billing keep the map inside
 * their loader, so it is read from the source; auth's exported map checks this reading.
 */
function aliasesFromSource(file: string): Record<string, string> {
  const source = readFileSync(file, 'utf8');
  const aliases: Record<string, string> = {};
  for (const m of source.matchAll(/\.\.\.(\w+EnvAliases)\b/g)) {
    const shared = sharedAliases[m[1]!];
    if (shared) Object.assign(aliases, shared);
  }
  for (const m of source.matchAll(/^\s+([A-Z][A-Z0-9_]*): '([a-z_]+(?:\.[a-z_]+)*)',?$/gm)) aliases[m[1]!] = m[2]!;
  return aliases;
}

/** `env.NAME` reads in a config.ts (the config file's variable, APP_ENV, NODE_ENV). */
function envReadsFromSource(file: string): Set<string> {
  const source = readFileSync(file, 'utf8');
  return new Set([...source.matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]!));
}

function serviceInfo(dir: string, prefix: string, schema: Schema, load: (env: NodeJS.ProcessEnv) => Doc): ServiceInfo {
  const file = path.join(root, 'services', dir, 'src/config.ts');
  return { dir, prefix, schema, aliases: aliasesFromSource(file), reads: envReadsFromSource(file), load };
}

const services: Record<string, ServiceInfo> = {
  auth: serviceInfo('auth', 'AUTH', authConfigSchema, (env) => {
    const config = loadAuthConfig(env);
    checkAuthConfig(config);
    return config;
  }),
  storage: serviceInfo('storage', 'STORAGE', storageConfigSchema, loadStorageConfig),
  'provider-registry': serviceInfo('provider-registry', 'REGISTRY', registryConfigSchema, loadRegistryConfig),
  billing: serviceInfo('billing', 'BILLING', billingConfigSchema, loadBillingConfig),
};
const contractPorts: Record<string, number> = SERVICE_PORTS;
/** Read by Node itself, and by the tracing set-up (OpenTelemetry's own names: packages/common/src/telemetry). */
const runtimeEnv = new Set(['NODE_ENV', 'NODE_OPTIONS', 'TZ', 'OTEL_EXPORTER_OTLP_ENDPOINT']);

// The parts of a zod definition the path walk reads (zod 4), as packages/common/src/config.ts reads them.
interface Def {
  type: string;
  shape?: Record<string, Schema>;
  innerType?: Schema;
  in?: Schema;
  out?: Schema;
}
const defOf = (schema: Schema) => schema._zod.def as unknown as Def;
const WRAPPERS = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'catch', 'nonoptional']);
const norm = (s: string) => s.toLowerCase().replaceAll('_', '');

/** The schema under wrappers and pipes (a `z.preprocess` is read at its output, a `.transform` at its input). */
function unwrap(schema: Schema): Schema {
  const def = defOf(schema);
  if (WRAPPERS.has(def.type) && def.innerType) return unwrap(def.innerType);
  if (def.type === 'pipe' && def.in && def.out) return unwrap(defOf(def.in).type === 'transform' ? def.out : def.in);
  return schema;
}

/**
 * Whether `segments` name a setting of the schema the way the loader resolves `<PREFIX>__A__B` (segments match keys
 * ignoring case and underscores): a leaf, or a key inside a record (`pricing.base_rates.<model>`). A section alone
 * (`BILLING__PRICING`) is no setting.
 */
function schemaHasPath(schema: Schema, segments: string[]): boolean {
  const node = unwrap(schema);
  const def = defOf(node);
  if (def.type === 'record') return segments.length > 0;
  if (def.type !== 'object' || !def.shape) return segments.length === 0;
  if (segments.length === 0) return false;
  const [head, ...rest] = segments;
  const key = Object.keys(def.shape).find((k) => norm(k) === norm(head!));
  return key !== undefined && schemaHasPath(def.shape[key]!, rest);
}

function knownEnv(info: ServiceInfo, name: string): boolean {
  if (runtimeEnv.has(name) || info.reads.has(name) || Object.hasOwn(info.aliases, name)) return true;
  const prefix = `${info.prefix}__`;
  if (!name.startsWith(prefix)) return false;
  const segments = name.slice(prefix.length).split('__').filter(Boolean);
  return segments.length > 0 && schemaHasPath(info.schema, segments);
}

// ---------------------------------------------------------------------------------------------------------------
// The files.

function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const file = path.join(dir, entry);
    if (statSync(file).isDirectory()) return yamlFiles(file);
    return /\.ya?ml$/.test(entry) ? [file] : [];
  });
}

function parseDocs(file: string): Doc[] {
  const docs = YAML.parseAllDocuments(readFileSync(file, 'utf8'));
  for (const d of docs) {
    if (d.errors.length > 0) throw new Error(`${rel(file)}: ${d.errors.map((e) => e.message).join('; ')}`);
  }
  return docs.map((d) => d.toJS()).filter((d) => d !== null && d !== undefined);
}

const files = yamlFiles(k8sDir);
const isKustomization = (file: string) => path.basename(file) === 'kustomization.yaml';
const kustomizationFiles = files.filter(isKustomization);
/** Helm values files (dependencies/<chart>/values.yaml): chart input, not Kubernetes objects. */
const valuesFiles = files.filter((f) => path.basename(f) === 'values.yaml');
const patchFiles = new Set(
  kustomizationFiles.flatMap((k) =>
    ((parseDocs(k)[0]?.patches ?? []) as Doc[])
      .filter((p) => typeof p.path === 'string')
      .map((p) => path.resolve(path.dirname(k), p.path)),
  ),
);
const resourceFiles = files.filter((f) => !isKustomization(f) && !valuesFiles.includes(f) && !patchFiles.has(f));

// ---------------------------------------------------------------------------------------------------------------
// Schema validation.

type ModelClass = (new (data: Doc) => { validate(): void }) & { apiVersion: string; kind: string };
/** Each kind this test validates, by its model's own `apiVersion/kind`. */
const models: Record<string, ModelClass> = Object.fromEntries(
  (
    [
      ConfigMap,
      Service,
      Deployment,
      HorizontalPodAutoscaler,
      PodDisruptionBudget,
      NetworkPolicy,
      Gateway,
      GatewayClass,
      HTTPRoute,
      ClientTrafficPolicy,
      BackendTrafficPolicy,
      SecurityPolicy,
      HTTPRouteFilter,
      EnvoyProxy,
      PrometheusRule,
      PodMonitor,
      ServiceMonitor,
    ] as unknown as ModelClass[]
  ).map((M) => [`${M.apiVersion}/${M.kind}`, M]),
);

/** Custom resources of the operators the docs name, checked for their structure (their CRDs are not vendored). */
function checkCustomResource(doc: Doc): void {
  const where = `${doc.kind} ${doc.metadata?.name}`;
  expect(doc.apiVersion, where).toBe('postgresql.cnpg.io/v1');
  expect(doc.metadata?.name, where).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  if (doc.kind === 'Cluster') {
    expect(Number.isInteger(doc.spec?.instances) && doc.spec.instances >= 1, where).toBe(true);
    expect(doc.spec?.storage?.size, where).toMatch(/^\d+(Mi|Gi|Ti)$/);
    expect(typeof doc.spec?.bootstrap?.initdb?.database, where).toBe('string');
    expect(typeof doc.spec?.bootstrap?.initdb?.owner, where).toBe('string');
  } else if (doc.kind === 'Database') {
    expect(typeof doc.spec?.name, where).toBe('string');
    expect(typeof doc.spec?.owner, where).toBe('string');
    expect(typeof doc.spec?.cluster?.name, where).toBe('string');
  } else {
    throw new Error(`${where}: no check for this kind`);
  }
}

function validate(doc: Doc, where: string): void {
  if (typeof doc.apiVersion === 'string' && doc.apiVersion.startsWith('postgresql.cnpg.io/')) {
    checkCustomResource(doc);
    return;
  }
  const Model = models[`${doc.apiVersion}/${doc.kind}`];
  expect(Model, `${where}: ${doc.apiVersion} ${doc.kind} is not a kind this test validates`).toBeDefined();
  try {
    new Model!(doc).validate();
  } catch (err) {
    throw new Error(`${where}: ${doc.kind} ${doc.metadata?.name} is invalid: ${(err as Error).message}`);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering an overlay the way kustomize does, for the features these manifests use.

const isTree = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const clone = <T>(v: T): T => structuredClone(v);

/** A strategic merge patch: maps merge, `null` deletes, lists of named items merge by name, other lists replace. */
function strategicMerge(target: Doc, patch: Doc): Doc {
  if (Array.isArray(patch)) {
    const named = patch.every((p) => isTree(p) && typeof p.name === 'string');
    if (!named || !Array.isArray(target)) return clone(patch);
    const out = target.map(clone);
    for (const item of patch) {
      const i = out.findIndex((t) => isTree(t) && t.name === item.name);
      if (i >= 0) out[i] = strategicMerge(out[i], item);
      else out.push(clone(item));
    }
    return out;
  }
  if (!isTree(patch) || !isTree(target)) return clone(patch);
  const out: Doc = { ...clone(target) };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = k in out ? strategicMerge(out[k], v) : clone(v);
  }
  return out;
}

function render(dir: string): Doc[] {
  const k = parseDocs(path.join(dir, 'kustomization.yaml'))[0];
  let docs: Doc[] = [];
  const load = (p: string) => {
    const target = path.resolve(dir, p);
    return statSync(target).isDirectory() ? render(target) : parseDocs(target);
  };
  for (const r of (k.resources ?? []) as string[]) docs.push(...load(r));
  for (const c of (k.components ?? []) as string[]) docs.push(...render(path.resolve(dir, c)));
  for (const p of (k.patches ?? []) as Doc[]) {
    const patches = p.path
      ? parseDocs(path.resolve(dir, p.path))
      : YAML.parseAllDocuments(p.patch).map((d) => d.toJS());
    for (const patch of patches) {
      const i = docs.findIndex((d) => d.kind === patch.kind && d.metadata?.name === patch.metadata?.name);
      if (i < 0) throw new Error(`${rel(dir)}: patch of ${patch.kind} ${patch.metadata?.name} matches nothing`);
      docs[i] = strategicMerge(docs[i], patch);
    }
  }
  for (const r of (k.replicas ?? []) as Doc[]) {
    const d = docs.find((x) => x.kind === 'Deployment' && x.metadata?.name === r.name);
    if (!d) throw new Error(`${rel(dir)}: replicas of ${r.name} matches no Deployment`);
    d.spec.replicas = r.count;
  }
  for (const img of (k.images ?? []) as Doc[]) {
    for (const d of docs.filter((x) => x.kind === 'Deployment')) {
      const pod = d.spec.template.spec;
      for (const c of [...(pod.initContainers ?? []), ...pod.containers] as Doc[]) {
        const [name] = String(c.image).split(':');
        if (name === img.name) c.image = `${img.newName ?? name}:${img.newTag}`;
      }
    }
  }
  if (k.namespace) docs = docs.map((d) => ({ ...d, metadata: { ...d.metadata, namespace: k.namespace } }));
  return docs;
}

/** Lists of named items in name order, keys sorted: two renderings compare equal when they mean the same. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) {
    const items = v.map(canonical);
    if (items.every((i) => isTree(i) && typeof i.name === 'string')) {
      return [...items].sort((a, b) => String((a as Doc).name).localeCompare(String((b as Doc).name)));
    }
    return items;
  }
  if (!isTree(v)) return v;
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, canonical(v[k])]),
  );
}

const kubectl = (() => {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

// ---------------------------------------------------------------------------------------------------------------
// Checks of a rendered set of objects.

const baseDocs = render(path.join(k8sDir, 'base'));
const overlays = readdirSync(path.join(k8sDir, 'overlays')).map((name) => ({
  name,
  dir: path.join(k8sDir, 'overlays', name),
}));
const find = (docs: Doc[], kind: string, name: string) =>
  docs.find((d) => d.kind === kind && d.metadata?.name === name);
const matches = (selector: Record<string, string> | undefined, labels: Record<string, string>) =>
  selector !== undefined && Object.entries(selector).every(([k, v]) => labels[k] === v);

/** The environment a container gets, with placeholders for Secret values and the pod's fields. */
function containerEnv(docs: Doc[], container: Doc, where: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of (container.envFrom ?? []) as Doc[]) {
    expect(from.secretRef, `${where}: envFrom a Secret hides which names the service gets; use secretKeyRef`).toBe(
      undefined,
    );
    const cm = find(docs, 'ConfigMap', from.configMapRef?.name);
    expect(cm, `${where}: envFrom ConfigMap ${from.configMapRef?.name} is not in deploy/k8s`).toBeDefined();
    Object.assign(env, cm.data ?? {});
  }
  for (const e of (container.env ?? []) as Doc[]) {
    if (e.value !== undefined) env[e.name] = String(e.value);
    else if (e.valueFrom?.secretKeyRef) {
      env[e.name] =
        e.name === 'DATABASE_URL'
          ? 'postgres://platform:placeholder@platform-pg-rw:5432/db'
          : e.name === 'SMTP_URL'
            ? 'smtp://placeholder:placeholder@smtp.example.com:587'
            : 'placeholder';
    } else if (e.valueFrom?.fieldRef) env[e.name] = 'pod-0';
    else if (e.valueFrom?.configMapKeyRef) {
      const cm = find(docs, 'ConfigMap', e.valueFrom.configMapKeyRef.name);
      env[e.name] = cm?.data?.[e.valueFrom.configMapKeyRef.key];
    } else throw new Error(`${where}: env ${e.name} has no value this test understands`);
  }
  return env;
}

/** The volume mounted at the deepest mount point above `file`, with its mount. */
function volumeFor(pod: Doc, container: Doc, file: string): { mount: Doc; volume: Doc } | undefined {
  const mounts = ((container.volumeMounts ?? []) as Doc[])
    .filter((m) => file === m.mountPath || file.startsWith(`${m.mountPath}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length);
  const mount = mounts[0];
  if (!mount) return undefined;
  return { mount, volume: ((pod.volumes ?? []) as Doc[]).find((v) => v.name === mount.name) };
}

/**
 * The configuration the service would load from this container's environment and its image's: files the environment names are
 * the mounted ConfigMap's content (written to a temporary folder), a key from a Secret is a fresh key.
 */
function loadServiceConfig(docs: Doc[], pod: Doc, container: Doc, info: ServiceInfo, where: string): Doc {
  // On the image's own environment (NODE_ENV=production: auth is then production unless APP_ENV says otherwise).
  const own = containerEnv(docs, container, where);
  const env = { ...imageEnv({ PORT: String(contractPorts[info.dir]) }), ...own };
  const scratch = mkdtempSync(path.join(tmpdir(), 'k8s-config-'));
  for (const [name, value] of Object.entries(own)) {
    if (!value.startsWith('/')) continue;
    const found = volumeFor(pod, container, value);
    expect(
      found,
      `${where}: ${name}=${value} is in no mounted volume (the root file system is read-only)`,
    ).toBeDefined();
    const { volume, mount } = found!;
    const key = path.relative(mount.mountPath, value);
    const local = path.join(scratch, name);
    if (volume.configMap) {
      const cm = find(docs, 'ConfigMap', volume.configMap.name);
      expect(cm?.data?.[key], `${where}: ${name} names key ${key} of ConfigMap ${volume.configMap.name}`).toBeDefined();
      writeFileSync(local, cm.data[key]);
      env[name] = local;
    } else if (volume.secret && name === 'JWT_PRIVATE_KEY_FILE') {
      const { privateKey } = generateKeyPairSync('ed25519');
      writeFileSync(local, privateKey.export({ type: 'pkcs8', format: 'pem' }));
      env[name] = local;
    } else {
      expect(volume.secret ?? volume.emptyDir, `${where}: ${name} is on a Secret or an emptyDir`).toBeDefined();
    }
  }
  return info.load(env);
}

function checkDeployments(docs: Doc[], label: string): void {
  for (const [name, info] of Object.entries(services)) {
    const where = `${label} Deployment ${name}`;
    const dep = find(docs, 'Deployment', name);
    expect(dep, `${where} is missing`).toBeDefined();
    const pod = dep.spec.template.spec;
    const labels = dep.spec.template.metadata.labels as Record<string, string>;
    expect(matches(dep.spec.selector.matchLabels, labels), `${where}: selector matches the pod labels`).toBe(true);
    expect(labels['app.kubernetes.io/part-of']).toBe('gpu-platform');
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(pod.securityContext.runAsUser, `${where}: a numeric user lets the kubelet verify runAsNonRoot`).toBeTypeOf(
      'number',
    );
    expect(pod.containers).toHaveLength(1);
    const container = pod.containers[0];
    expect(container.image).toMatch(new RegExp(`^ghcr\\.io/gpu-platform/${name}:[\\w][\\w.-]*$`));
    expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(container.securityContext.allowPrivilegeEscalation).toBe(false);
    for (const v of (pod.volumes ?? []) as Doc[]) {
      // 0440 in YAML 1.1 (kubectl) is octal, in YAML 1.2 decimal: the manifests write the number (288).
      if (v.secret?.defaultMode !== undefined) expect(v.secret.defaultMode, `${where}: ${v.name}`).toBe(0o440);
    }
    const tmp = volumeFor(pod, container, '/tmp');
    expect(tmp?.mount.mountPath, `${where}: /tmp is a volume`).toBe('/tmp');
    expect(tmp?.volume.emptyDir, `${where}: /tmp is an emptyDir`).toBeDefined();
    for (const kind of ['requests', 'limits']) {
      expect(container.resources[kind].cpu, `${where} ${kind}.cpu`).toBeDefined();
      expect(container.resources[kind].memory, `${where} ${kind}.memory`).toBeDefined();
    }

    // A service that keeps an audit trail runs its migration step first, as the database's owner, with the same image;
    // the service itself never gets the owner's URL (services/auth/README.md, "The audit trail").
    const inits = (pod.initContainers ?? []) as Doc[];
    if (name === 'auth' || name === 'billing') {
      expect(
        inits.map((c) => c.name),
        `${where}: the migration step`,
      ).toEqual(['migrate']);
      const step = containerEnv(docs, inits[0]!, `${where} init container`);
      expect(inits[0]!.image).toBe(container.image);
      expect(inits[0]!.securityContext.readOnlyRootFilesystem).toBe(true);
      expect(
        Object.keys(step).filter((n) => !knownEnv(info, n)),
        `${where}: the migration step's variables`,
      ).toEqual([]);
      expect(step).toMatchObject({ MIGRATE_ONLY: 'true', DATABASE_MIGRATION_URL: 'placeholder' });
      expect(loadServiceConfig(docs, pod, inits[0]!, info, where).database.migrate_only).toBe(true);
      expect(containerEnv(docs, container, where).DATABASE_MIGRATION_URL, `${where}: no owner's URL`).toBeUndefined();
    } else {
      expect(inits, `${where}: no init containers`).toEqual([]);
    }

    // Every variable is one the service understands, and the service's own loader accepts the values.
    const env = containerEnv(docs, container, where);
    // A variable only there for another's `$(NAME)` (Kubernetes expands it: the pod's IP into an address) is read
    // through that one.
    const referenced = new Set(
      (container.env as Doc[] | undefined)?.flatMap((e) =>
        typeof e.value === 'string' ? [...e.value.matchAll(/\$\(([A-Z_][A-Z0-9_]*)\)/g)].map((m) => m[1]!) : [],
      ) ?? [],
    );
    const unknown = Object.keys(env).filter((n) => !knownEnv(info, n) && !referenced.has(n));
    expect(unknown, `${where}: variables ${info.dir} does not read`).toEqual([]);
    const config = loadServiceConfig(docs, pod, container, info, where);
    expect(config.registry.enabled, `${where}: Consul registration is off`).toBe(false);
    expect(config.access.enabled).toBe(true);
    expect(config.access.jwks_url).toBe('http://auth:8000/.well-known/jwks.json');
    if ('database' in config) expect(config.database.url, `${where}: PostgreSQL, not embedded PGlite`).not.toBe('');

    // Port, routes, probes.
    const port = (container.ports as Doc[]).find((p) => p.name === 'http');
    expect(port?.containerPort, `${where}: containerPort`).toBe(config.server.port);
    expect(config.server.port).toBe(contractPorts[name]);
    expect(config.server.metrics_enabled).toBe(true);
    expect(container.readinessProbe.httpGet.path, `${where}: readiness on the health route's ready check`).toBe(
      `${config.server.health_path}/ready`,
    );
    for (const probe of ['livenessProbe', 'startupProbe']) {
      expect(container[probe].httpGet.path, `${where}: ${probe} on the health route's live check (no dependency)`).toBe(
        `${config.server.health_path}/live`,
      );
    }
    for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
      expect(container[probe].httpGet.port, `${where}: ${probe} port`).toBe('http');
    }
    const annotations = dep.spec.template.metadata.annotations;
    expect(annotations['prometheus.io/scrape']).toBe('true');
    expect(annotations['prometheus.io/port']).toBe(String(config.server.port));
    expect(annotations['prometheus.io/path']).toBe('/metrics');

    // The pod is given longer than its pre-stop pause and graceful shutdown take.
    const preStop = container.lifecycle?.preStop?.exec?.command as string[] | undefined;
    const pauseMs = preStop?.[0] === 'sleep' ? Number(preStop[1]) * 1000 : 0;
    expect(pod.terminationGracePeriodSeconds * 1000, `${where}: terminationGracePeriodSeconds`).toBeGreaterThan(
      pauseMs + durationMs(config.shutdown_timeout),
    );

    // Service, autoscaler, disruption budget.
    const svc = find(docs, 'Service', name);
    expect(matches(svc?.spec.selector, labels), `${label} Service ${name} selects the pods`).toBe(true);
    expect(svc.spec.ports[0].port).toBe(config.server.port);
    expect(svc.spec.ports[0].targetPort).toBe('http');
    const hpa = find(docs, 'HorizontalPodAutoscaler', name);
    expect(hpa?.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name });
    expect(hpa.spec.minReplicas).toBeLessThanOrEqual(hpa.spec.maxReplicas);
    const pdb = find(docs, 'PodDisruptionBudget', name);
    expect(matches(pdb?.spec.selector.matchLabels, labels), `${label} PDB ${name} selects the pods`).toBe(true);
    if (pdb.spec.minAvailable !== undefined) {
      expect(pdb.spec.minAvailable, `${label} PDB ${name} leaves a pod to evict`).toBeLessThan(hpa.spec.minReplicas);
    }
    const policy = find(docs, 'NetworkPolicy', name);
    expect(matches(policy?.spec.podSelector.matchLabels, labels), `${label} NetworkPolicy ${name} selects pods`).toBe(
      true,
    );
  }
}

/** Whether a pod with `labels` in the policy's own namespace may reach `port` of the pods `policy` selects. */
function admits(policy: Doc, labels: Record<string, string>, port: number): boolean {
  return (policy.spec.ingress as Doc[]).some(
    (rule) =>
      (rule.ports ?? []).some((p: Doc) => p.port === port) &&
      (rule.from as Doc[]).some((f) => !f.namespaceSelector && matches(f.podSelector?.matchLabels, labels)),
  );
}

/** Whether a pod of namespace `ns` with `labels` may reach `port` (a namespaceSelector by name). */
function admitsFrom(policy: Doc, ns: string, labels: Record<string, string>, port: number): boolean {
  return (policy.spec.ingress as Doc[]).some(
    (rule) =>
      (rule.ports ?? []).some((p: Doc) => p.port === port) &&
      (rule.from as Doc[]).some(
        (f) =>
          matches(f.namespaceSelector?.matchLabels, { 'kubernetes.io/metadata.name': ns }) &&
          matches(f.podSelector?.matchLabels ?? {}, labels),
      ),
  );
}

// ---------------------------------------------------------------------------------------------------------------

describe('deploy/k8s', () => {
  it('finds the manifests', () => {
    expect(resourceFiles.length).toBeGreaterThan(20);
    expect(overlays.map((o) => o.name).sort()).toEqual(['dev', 'production']);
  });

  it.each(resourceFiles.map(rel))('%s: every document is valid against the Kubernetes schemas', (file) => {
    const docs = parseDocs(path.join(root, file));
    expect(docs.length).toBeGreaterThan(0);
    for (const doc of docs) validate(doc, file);
  });

  it('holds no Secret: secrets are created in the cluster, named by the manifests', () => {
    for (const file of resourceFiles) {
      for (const doc of parseDocs(file)) expect(doc.kind, rel(file)).not.toBe('Secret');
    }
  });

  it.each(kustomizationFiles.map(rel))('%s: every path it names exists', (file) => {
    const dir = path.dirname(path.join(root, file));
    const k = parseDocs(path.join(root, file))[0];
    expect(k.apiVersion).toMatch(/^kustomize\.config\.k8s\.io\//);
    expect(['Kustomization', 'Component']).toContain(k.kind);
    const paths = [
      ...((k.resources ?? []) as string[]),
      ...((k.components ?? []) as string[]),
      ...((k.patches ?? []) as Doc[]).filter((p) => p.path).map((p) => p.path as string),
    ];
    expect(paths.length).toBeGreaterThan(0);
    for (const p of paths) expect(existsSync(path.resolve(dir, p)), `${file}: ${p}`).toBe(true);
    for (const p of (k.patches ?? []) as Doc[]) expect(p.path ?? p.patch, `${file}: a patch`).toBeDefined();
  });

  it('names every image in the base kustomization, so overlays set the tags', () => {
    const k = parseDocs(path.join(k8sDir, 'base/kustomization.yaml'))[0];
    const names = (k.images as Doc[]).map((i) => i.name).sort();
    expect(names).toEqual(
      Object.keys(services)
        .map((s) => `ghcr.io/gpu-platform/${s}`)
        .sort(),
    );
    for (const { dir } of overlays) {
      const o = parseDocs(path.join(dir, 'kustomization.yaml'))[0];
      expect((o.images as Doc[]).map((i) => i.name).sort(), rel(dir)).toEqual(names);
      for (const i of o.images as Doc[]) expect(i.newTag, `${rel(dir)} ${i.name}`).toMatch(/^[\w][\w.-]*$/);
    }
  });

  it("reads each service's environment names from its code", () => {
    // The source reading of the alias maps gives auth's exported map.
    expect(services.auth!.aliases).toEqual(authEnvAliases);
    expect(services.storage!.aliases).toMatchObject({ S3_ENDPOINT: 'object_store.endpoint', LOG_LEVEL: 'log_level' });
    expect(services['provider-registry']!.aliases).toMatchObject({
      DATABASE_URL: 'database.url',
      NATS_URL: 'messaging.nats_url',
    });
    expect(services.billing!.aliases).toMatchObject({ TREASURY_KEYPAIR_PATH: 'blockchain.private_key_path' });
    expect(services.storage!.reads.has('STORAGE_CONFIG_FILE')).toBe(true);
    for (const info of Object.values(services)) {
      for (const [name, dotted] of Object.entries(info.aliases)) {
        expect(schemaHasPath(info.schema, dotted.split('.')), `${info.dir}: alias ${name} -> ${dotted}`).toBe(true);
      }
    }
    // The walk resolves `<PREFIX>__A__B` as the loader does, and refuses what the loader refuses.
    const auth = services.auth!;
    expect(knownEnv(auth, 'AUTH__CLIENTS__SECRETS_DIR')).toBe(true);
    expect(knownEnv(auth, 'AUTH__RATE_LIMIT__LOGIN_PER_IP')).toBe(true);
    expect(knownEnv(auth, 'AUTH__SERVER__TRUSTEDPROXIES')).toBe(true);
    expect(knownEnv(auth, 'AUTH__CLIENTS')).toBe(false);
    expect(knownEnv(auth, 'AUTH__CLIENTS__SECRET_DIR')).toBe(false);
    expect(knownEnv(auth, 'S3_ENDPOINT')).toBe(false);
    expect(knownEnv(services['provider-registry']!, 'REGISTRY__REGISTRY__REGISTRATION__ADDRESS')).toBe(true);
    expect(knownEnv(services['provider-registry']!, 'REGISTRY__DATABASE__RETRY_ATTEMPTS')).toBe(true);
    expect(knownEnv(services.billing!, 'BILLING__PRICING__BASE_RATES__NVIDIA_TESLA_H100')).toBe(true);
    expect(knownEnv(services.billing!, 'BILLING__BLOCKCHAIN__NOPE')).toBe(false);
    expect(knownEnv(services.storage!, 'STORAGE__OBJECT_STORE__DEFAULTBUCKET')).toBe(true);
  });

  it('base: the Deployments match the services (env names and values, port, probes, shutdown, security)', () => {
    checkDeployments(baseDocs, 'base');
  });

  it.each(overlays.map((o) => o.name))('overlay %s renders to valid objects that match the services', (name) => {
    const docs = render(path.join(k8sDir, 'overlays', name));
    for (const doc of docs) validate(doc, `overlays/${name}`);
    checkDeployments(docs, `overlays/${name}`);
    for (const doc of docs) expect(doc.metadata.namespace, `${doc.kind} ${doc.metadata.name}`).toBeDefined();
    const deployments = docs.filter((d) => d.kind === 'Deployment');
    if (name === 'dev') {
      for (const d of deployments) expect(d.spec.replicas, d.metadata.name).toBe(1);
    } else {
      for (const d of deployments) {
        const hpa = find(docs, 'HorizontalPodAutoscaler', d.metadata.name);
        const pdb = find(docs, 'PodDisruptionBudget', d.metadata.name);
        expect(d.spec.replicas, d.metadata.name).toBeGreaterThanOrEqual(3);
        expect(hpa.spec.minReplicas).toBe(d.spec.replicas);
        expect(pdb.spec.minAvailable).toBe(2);
        expect(pdb.spec.maxUnavailable).toBeUndefined();
      }
    }
  });

  it.skipIf(!kubectl).each(overlays.map((o) => o.name))('overlay %s: kubectl kustomize renders the same', (name) => {
    const out = execFileSync('kubectl', ['kustomize', path.join(k8sDir, 'overlays', name)], { encoding: 'utf8' });
    const byKey = (docs: Doc[]) => Object.fromEntries(docs.map((d) => [`${d.kind}/${d.metadata.name}`, canonical(d)]));
    const theirs = YAML.parseAllDocuments(out).map((d) => d.toJS());
    expect(byKey(render(path.join(k8sDir, 'overlays', name)))).toEqual(byKey(theirs));
  });

  it('the dev overlay bootstraps the machine clients into a writable volume', () => {
    const docs = render(path.join(k8sDir, 'overlays/dev'));
    const dep = find(docs, 'Deployment', 'auth');
    const container = dep.spec.template.spec.containers[0];
    const config = loadServiceConfig(docs, dep.spec.template.spec, container, services.auth!, 'dev auth');
    expect(config.clients.bootstrap.length).toBeGreaterThan(0);
    const found = volumeFor(dep.spec.template.spec, container, config.clients.secrets_dir);
    expect(found?.volume.emptyDir).toBeDefined();
  });

  it("keeps the production pods' database connections, every service at its autoscaler's maximum, under max_connections", () => {
    const docs = render(path.join(k8sDir, 'overlays/production'));
    let total = 0;
    for (const [name, info] of Object.entries(services)) {
      const pod = find(docs, 'Deployment', name).spec.template.spec;
      const config = loadServiceConfig(docs, pod, pod.containers[0], info, `production ${name}`);
      const pods = find(docs, 'HorizontalPodAutoscaler', name).spec.maxReplicas as number;
      // Its pool, and one connection of the audit purge's where it keeps an audit trail.
      total += pods * (config.database.pool_size + (config.audit?.purge_url ? 1 : 0));
    }
    const cluster = parseDocs(path.join(k8sDir, 'dependencies/cnpg/cluster.yaml'))[0];
    const max = Number(cluster.spec.postgresql.parameters.max_connections);
    // Room beside them for the migration steps of a rollout, the superuser's reserve, operators and monitoring.
    expect(total + 50, `${total} connections at the HPA maxima`).toBeLessThanOrEqual(max);
    expect(readFileSync(path.join(k8sDir, 'README.md'), 'utf8')).toContain(`= ${total})`);
  });

  it('the NetworkPolicies let each caller in, and only on the service port', () => {
    const deny = find(baseDocs, 'NetworkPolicy', 'gpu-platform-default-deny-ingress');
    expect(deny.spec.podSelector.matchLabels).toEqual({ 'app.kubernetes.io/part-of': 'gpu-platform' });
    const podLabels = (name: string) => find(baseDocs, 'Deployment', name).spec.template.metadata.labels;
    const policy = (name: string) => find(baseDocs, 'NetworkPolicy', name);
    const role = (component: string) => ({ 'app.kubernetes.io/component': component });
    for (const [name, port] of Object.entries(contractPorts)) {
      // Every service fetches auth's JWKS.
      expect(admits(policy('auth'), podLabels(name), 8000), `${name} -> auth`).toBe(true);
      expect(admits(policy(name), role('gateway'), port), `gateway -> ${name}`).toBe(true);
      expect(admits(policy(name), role('provider-daemon'), port), `provider daemons -> ${name}`).toBe(true);
      expect(
        admitsFrom(
          policy(name),
          'envoy-gateway-system',
          { 'app.kubernetes.io/name': 'envoy', 'app.kubernetes.io/component': 'proxy' },
          port,
        ),
        `the Gateway's proxies -> ${name}`,
      ).toBe(true);
      expect(
        admitsFrom(policy(name), 'monitoring', { 'app.kubernetes.io/name': 'prometheus' }, port),
        `prometheus -> ${name}`,
      ).toBe(true);
      expect(admits(policy(name), role('gateway'), port + 100), `${name}: only its port`).toBe(false);
      expect(admits(policy(name), { 'app.kubernetes.io/name': 'stranger' }, port), `stranger -> ${name}`).toBe(false);
      for (const rule of policy(name).spec.ingress as Doc[]) {
        expect(rule.ports, `${name}: every rule names the port`).toEqual([{ port, protocol: 'TCP' }]);
      }
    }
    // Billing calls the registry; the scheduler calls the registry and billing.
    expect(admits(policy('provider-registry'), podLabels('billing'), 8002)).toBe(true);
    expect(admits(policy('provider-registry'), role('scheduler'), 8002)).toBe(true);
    expect(admits(policy('billing'), role('scheduler'), 8003)).toBe(true);
    // Billing calls storage (grants of workloads' files); no other platform service calls storage or billing.
    expect(admits(policy('storage'), podLabels('billing'), 8001)).toBe(true);
    expect(admits(policy('storage'), podLabels('provider-registry'), 8001)).toBe(false);
    expect(admits(policy('billing'), podLabels('provider-registry'), 8003)).toBe(false);
    // A renter's stream that reached a billing pod without the machine's connection goes on to the pod holding it.
    expect(admits(policy('billing'), podLabels('billing'), 8003), 'billing -> billing').toBe(true);
  });

  it('documents every Secret and key the manifests reference', () => {
    const readme = readFileSync(path.join(k8sDir, 'README.md'), 'utf8');
    const refs = new Set<string>();
    for (const dep of baseDocs.filter((d) => d.kind === 'Deployment')) {
      const pod = dep.spec.template.spec;
      for (const e of [...(pod.initContainers ?? []), ...pod.containers].flatMap((c: Doc) => c.env ?? []) as Doc[]) {
        const ref = e.valueFrom?.secretKeyRef;
        if (ref) refs.add(`${ref.name} ${ref.key}`);
      }
      for (const v of (pod.volumes ?? []) as Doc[]) {
        if (!v.secret) continue;
        const dep2 = pod.containers[0];
        const mount = (dep2.volumeMounts as Doc[]).find((m) => m.name === v.name);
        const file = (dep2.env as Doc[]).find((e) => String(e.value ?? '').startsWith(`${mount.mountPath}/`));
        refs.add(`${v.secret.secretName} ${path.basename(file.value)}`);
      }
    }
    expect(refs.size).toBeGreaterThan(5);
    for (const ref of refs) {
      const [name, key] = ref.split(' ');
      expect(readme, `deploy/k8s/README.md names Secret ${name}`).toContain(`\`${name}\``);
      expect(readme, `deploy/k8s/README.md names key ${key} of ${name}`).toContain(`\`${key}\``);
    }
    expect(readme).not.toContain('../shared');
  });

  it("runs NATS in operator mode: each service's pod mounts its own user, auth the issuer, and the chart's operator part works", async () => {
    const pods = Object.fromEntries(
      baseDocs.filter((d) => d.kind === 'Deployment').map((d) => [d.metadata.name, d.spec.template.spec]),
    );
    const envOf = (name: string) =>
      Object.fromEntries((pods[name].containers[0].env as Doc[]).map((e) => [e.name, e.value]));
    for (const name of Object.keys(PLATFORM_NATS_USERS)) {
      const volume = (pods[name].volumes as Doc[]).find((v) => v.secret?.secretName === 'nats-creds');
      // Its own key alone: a pod never holds another service's user.
      expect(volume?.secret.items, name).toEqual([{ key: `${name}.creds`, path: `${name}.creds` }]);
      expect(envOf(name).NATS_CREDENTIALS, name).toBe(`/var/run/secrets/gpu-platform/nats/${name}.creds`);
    }
    expect(envOf('provider-registry').REGISTRY__MESSAGING__SUBJECT_IDENTITY).toBe('true');
    expect(envOf('billing').BILLING__MESSAGING__SUBJECT_IDENTITY).toBe('true');
    expect(envOf('auth').NATS_ISSUER_FILE).toBe('/var/run/secrets/gpu-platform/nats-issuer/issuer.json');
    // pnpm nats-setup's operator part, as the chart merges it into nats.conf, starts a real nats-server that admits
    // the users it wrote.
    const dir = mkdtempSync(path.join(tmpdir(), 'k8s-nats-'));
    execFileSync(process.execPath, ['--import', 'tsx', 'scripts/nats-setup.ts', '--dir', dir], { cwd: root });
    const merge = YAML.parse(readFileSync(path.join(dir, 'server', 'nats-values.yaml'), 'utf8')).config.merge as Doc;
    const port = await freePort();
    writeFileSync(
      path.join(dir, 'nats.conf'),
      [
        `listen: 127.0.0.1:${port}`,
        `jetstream: { store_dir: ${JSON.stringify(path.join(dir, 'store'))} }`,
        ...Object.entries(merge).map(([key, value]) => `${key}: ${JSON.stringify(value)}`),
        '',
      ].join('\n'),
    );
    const server = spawn('nats-server', ['-c', path.join(dir, 'nats.conf')], { stdio: 'ignore' });
    try {
      // The server is up once it admits the user (waitOnFirstConnect: the client retries until it is).
      const billing = await connect({
        servers: `127.0.0.1:${port}`,
        authenticator: fileCredentials(path.join(dir, 'creds', 'billing.creds')),
        waitOnFirstConnect: true,
        timeout: 30_000,
      });
      billing.publish('billing.events.test', '{}');
      await billing.flush();
      await billing.close();
      await expect(connect({ servers: `127.0.0.1:${port}`, maxReconnectAttempts: 0 })).rejects.toThrow(/authoriz/i);
    } finally {
      server.kill();
    }
  });

  it('the dependency examples: CloudNativePG databases, NATS with JetStream, an S3 store', () => {
    const cnpg = render(path.join(k8sDir, 'dependencies/cnpg'));
    const cluster = cnpg.find((d) => d.kind === 'Cluster');
    const databases = [
      cluster.spec.bootstrap.initdb.database,
      ...cnpg.filter((d) => d.kind === 'Database').map((d) => d.spec.name),
    ];
    for (const d of cnpg.filter((x) => x.kind === 'Database')) expect(d.spec.cluster.name).toBe(cluster.metadata.name);
    // The databases docker-compose's PostgreSQL creates (deploy/postgres/init.sql) exist here too.
    const init = readFileSync(path.join(root, 'deploy/postgres/init.sql'), 'utf8');
    const wanted = [...init.matchAll(/CREATE DATABASE (\w+);/g)].map((m) => m[1]);
    expect(databases.sort()).toEqual(wanted.sort());
    const nats = parseDocs(path.join(k8sDir, 'dependencies/nats/values.yaml'))[0];
    expect(nats.config.jetstream.enabled).toBe(true);
    expect(nats.config.jetstream.fileStore.pvc.enabled).toBe(true);
    const minio = parseDocs(path.join(k8sDir, 'dependencies/minio/values.yaml'))[0];
    const storageConfig = YAML.parse(find(baseDocs, 'ConfigMap', 'storage-config').data['config.yaml']);
    expect(minio.buckets.map((b: Doc) => b.name)).toContain(storageConfig.object_store.default_bucket);
  });
});

describe('deploy/k8s/monitoring', () => {
  const monitoring = render(path.join(k8sDir, 'monitoring'));
  /** The job names the rules match: `up{job=~"a|b"}`'s alternatives and every `job="..."`. */
  const ruleJobs = () => {
    const rule = monitoring.find((d) => d.kind === 'PrometheusRule');
    const exprs = (rule.spec.groups as Doc[]).flatMap((g) => (g.rules as Doc[]).map((r) => String(r.expr)));
    const jobs = new Set<string>();
    for (const expr of exprs) {
      for (const m of expr.matchAll(/job=~"([^"]+)"/g)) for (const j of m[1]!.split('|')) jobs.add(j);
      for (const m of expr.matchAll(/job="([^"]+)"/g)) jobs.add(m[1]!);
    }
    return jobs;
  };

  it('scrapes every service with a ServiceMonitor, under the job name the rules match', () => {
    const monitors = monitoring.filter((d) => d.kind === 'ServiceMonitor');
    expect(monitors.map((m) => m.metadata.name).sort()).toEqual(Object.keys(services).sort());
    const jobs: string[] = [];
    for (const monitor of monitors) {
      const where = `ServiceMonitor ${monitor.metadata.name}`;
      expect(monitor.metadata.labels['app.kubernetes.io/part-of'], where).toBe('gpu-platform');
      // It selects exactly the service's Service (in its own namespace: no namespaceSelector) ...
      const selected = baseDocs.filter(
        (d) => d.kind === 'Service' && matches(monitor.spec.selector.matchLabels, d.metadata.labels ?? {}),
      );
      expect(
        selected.map((d) => d.metadata.name),
        where,
      ).toEqual([monitor.metadata.name]);
      expect(monitor.spec.namespaceSelector, where).toBeUndefined();
      const svc = selected[0];
      // ... on its named port, at the path the pods' scrape annotation names (/metrics) ...
      expect(monitor.spec.endpoints, where).toHaveLength(1);
      const [endpoint] = monitor.spec.endpoints as Doc[];
      expect(
        (svc.spec.ports as Doc[]).map((p) => p.name),
        where,
      ).toContain(endpoint.port);
      const pod = find(baseDocs, 'Deployment', svc.metadata.name).spec.template;
      expect(endpoint.path, where).toBe(pod.metadata.annotations['prometheus.io/path']);
      // ... and names the job by the Service's label (the operator's default would be the Service's name).
      jobs.push(monitor.spec.jobLabel ? svc.metadata.labels[monitor.spec.jobLabel] : svc.metadata.name);
    }
    expect(jobs.sort()).toEqual([...ruleJobs()].sort());
    // The same jobs as docker-compose's Prometheus scrapes (which scrapes its gateway's telemetry receiver too: the
    // Kubernetes gateway is Envoy, scraped by the PodMonitor below).
    const compose = YAML.parse(readFileSync(path.join(root, 'deploy/prometheus/prometheus.yml'), 'utf8'));
    const composeJobs = (compose.scrape_configs as Doc[]).map((c) => c.job_name).filter((j) => j !== 'gateway');
    expect(composeJobs.sort()).toEqual(jobs.sort());
  });

  it("is what its kustomization applies: the ServiceMonitors, the gateway's PodMonitor and the rules", () => {
    expect(monitoring.map((d) => d.kind).sort()).toEqual([
      'PodMonitor',
      'PrometheusRule',
      'ServiceMonitor',
      'ServiceMonitor',
      'ServiceMonitor',
      'ServiceMonitor',
    ]);
  });
});

describe('deploy/k8s/gateway', () => {
  /** A Gateway API duration (`60s`, `5m`, `0s`) in milliseconds. */
  const ms = (d: string) => {
    const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 };
    return [...d.matchAll(/(\d+)(h|ms|m|s)/g)].reduce((sum, m) => sum + Number(m[1]) * units[m[2]!]!, 0);
  };
  const attachedTo = (route: Doc, listener: string) =>
    (route.spec.parentRefs as Doc[]).some((p) => p.name === 'platform' && p.sectionName === listener);

  it.each(overlays.map((o) => o.name))(
    "overlay %s: one Gateway, TLS on 443, plain HTTP only redirecting, in the services' namespace",
    (name) => {
      const docs = render(path.join(k8sDir, 'overlays', name));
      const gateways = docs.filter((d) => d.kind === 'Gateway');
      expect(gateways.map((g) => g.metadata.name)).toEqual(['platform']);
      const gateway = gateways[0];
      expect(gateway.metadata.namespace).toBe(find(docs, 'Deployment', 'auth').metadata.namespace);
      const https = (gateway.spec.listeners as Doc[]).find((l) => l.name === 'https');
      expect(https).toMatchObject({ protocol: 'HTTPS', port: 443, tls: { mode: 'Terminate' } });
      expect(https.tls.certificateRefs).toEqual([{ kind: 'Secret', name: 'platform-tls' }]);
      const http = (gateway.spec.listeners as Doc[]).find((l) => l.name === 'http');
      expect(http).toMatchObject({ protocol: 'HTTP', port: 80 });
      for (const l of gateway.spec.listeners as Doc[]) expect(l.allowedRoutes.namespaces.from).toBe('Same');
      const plain = docs.filter(
        (d) => d.kind === 'HTTPRoute' && (attachedTo(d, 'http') || attachedTo(d, 'http-ports')),
      );
      expect(plain.map((r) => r.metadata.name)).toEqual(['https-redirect']);
      expect(attachedTo(plain[0], 'http') && attachedTo(plain[0], 'http-ports')).toBe(true);
      // The port hosts' listeners: a wildcard name under `ports.`, TLS with a wildcard certificate of its own.
      const httpsPorts = (gateway.spec.listeners as Doc[]).find((l) => l.name === 'https-ports');
      expect(httpsPorts).toMatchObject({ protocol: 'HTTPS', port: 443, tls: { mode: 'Terminate' } });
      expect(httpsPorts.hostname).toMatch(/^\*\.ports\.[a-z0-9.-]+$/);
      expect(httpsPorts.tls.certificateRefs).toEqual([{ kind: 'Secret', name: 'platform-ports-tls' }]);
      const httpPorts = (gateway.spec.listeners as Doc[]).find((l) => l.name === 'http-ports');
      expect(httpPorts).toMatchObject({ protocol: 'HTTP', port: 80, hostname: httpsPorts.hostname });
      for (const rule of plain[0].spec.rules as Doc[]) {
        expect(rule.backendRefs).toBeUndefined();
        expect(rule.filters).toEqual([
          { type: 'RequestRedirect', requestRedirect: { scheme: 'https', statusCode: 301 } },
        ]);
      }
      // Every route hangs on a listener of this Gateway; every policy names objects that are here.
      const listeners = (gateway.spec.listeners as Doc[]).map((l) => l.name as string);
      for (const route of docs.filter((d) => d.kind === 'HTTPRoute')) {
        expect(
          listeners.some((l) => attachedTo(route, l)),
          route.metadata.name,
        ).toBe(true);
      }
      for (const policy of docs.filter((d) => String(d.apiVersion).startsWith('gateway.envoyproxy.io/'))) {
        for (const ref of (policy.spec.targetRefs ?? []) as Doc[]) {
          expect(find(docs, ref.kind, ref.name), `${policy.kind} ${policy.metadata.name} -> ${ref.name}`).toBeDefined();
        }
      }
      const gatewayClass = parseDocs(path.join(k8sDir, 'dependencies/envoy-gateway/gatewayclass.yaml'))[0];
      expect(gateway.spec.gatewayClassName).toBe(gatewayClass.metadata.name);
      expect(gatewayClass.spec.controllerName).toBe('gateway.envoyproxy.io/gatewayclass-controller');
    },
  );

  const docs = render(path.join(k8sDir, 'overlays/production'));
  const route = (name: string) => find(docs, 'HTTPRoute', name);

  it("routes exactly the platform's route table, each prefix to its service's Service and port", () => {
    const routed: Record<string, { name: string; port: number }> = {};
    for (const service of Object.keys(ROUTES) as PlatformService[]) {
      const r = route(service);
      expect(r, service).toBeDefined();
      expect(attachedTo(r, 'https')).toBe(true);
      for (const rule of r.spec.rules as Doc[]) {
        expect(rule.backendRefs).toEqual([{ name: service, port: SERVICE_PORTS[service] }]);
        expect(rule.filters, `${service}: paths pass unchanged`).toBeUndefined();
        for (const m of rule.matches as Doc[]) {
          expect(m.path.type).toBe('PathPrefix');
          routed[m.path.value] = rule.backendRefs[0];
        }
      }
      // The Service exists and serves that port.
      const svc = find(docs, 'Service', service);
      expect((svc.spec.ports as Doc[]).map((p) => p.port)).toContain(SERVICE_PORTS[service]);
    }
    const expected = Object.fromEntries(
      (Object.entries(ROUTES) as [PlatformService, readonly string[]][]).flatMap(([service, prefixes]) =>
        prefixes.map((prefix) => [prefix, { name: service, port: SERVICE_PORTS[service] }]),
      ),
    );
    expect(routed).toEqual(expected);
    // No other route reaches a service but the operators' health.
    const reaching = docs
      .filter((d) => d.kind === 'HTTPRoute' && (d.spec.rules as Doc[]).some((r) => r.backendRefs))
      .map((d) => d.metadata.name)
      .sort();
    expect(reaching).toEqual(
      [...Object.keys(ROUTES), 'operators-health', 'websockets', 'port-hosts', 'port-host-websockets'].sort(),
    );
  });

  it('sends every request to a port host to billing, whatever its path, upgrades with an hour to idle', () => {
    const listener = (find(docs, 'Gateway', 'platform').spec.listeners as Doc[]).find((l) => l.name === 'https-ports');
    const domain = String(listener.hostname).replace(/^\*\.ports\./, '');
    // A port host as the route table knows it lies under the listener's wildcard (one label or more before `ports.`).
    const portHost = `3f2b0c1e-1111-4aaa-8bbb-0123456789ab-8888.ports.${domain}`;
    expect(PORT_HOST.test(portHost)).toBe(true);
    const wildcard = (name: string) => new RegExp(`^[^*]+\\.${name.slice(2).replaceAll('.', '\\.')}$`);
    expect(wildcard(listener.hostname).test(portHost)).toBe(true);
    for (const name of ['port-hosts', 'port-host-websockets']) {
      const r = route(name);
      expect(r.spec.parentRefs, name).toEqual([{ name: 'platform', sectionName: 'https-ports' }]);
      expect(r.spec.hostnames, name).toEqual([listener.hostname]);
      expect(r.spec.rules, name).toHaveLength(1);
      const [rule] = r.spec.rules as Doc[];
      expect(rule.backendRefs).toEqual([{ name: PORT_HOST_SERVICE, port: SERVICE_PORTS[PORT_HOST_SERVICE] }]);
      expect(rule.filters, `${name}: path and Host pass unchanged`).toBeUndefined();
      expect(rule.timeouts, `${name}: no limit on a whole request`).toEqual({ request: '0s' });
      expect(rule.matches[0].path).toEqual({ type: 'PathPrefix', value: '/' });
    }
    expect(route('port-hosts').spec.rules[0].matches).toEqual([{ path: { type: 'PathPrefix', value: '/' } }]);
    expect(route('port-host-websockets').spec.rules[0].matches[0].headers).toEqual([
      { type: 'RegularExpression', name: 'Upgrade', value: '(?i)websocket' },
    ]);
    // No other route takes these names: every route of the API's listener is for its name alone.
    for (const other of docs.filter((d) => d.kind === 'HTTPRoute' && attachedTo(d, 'https'))) {
      expect(other.spec.hostnames, other.metadata.name).toBeUndefined();
      expect(attachedTo(other, 'https-ports'), other.metadata.name).toBe(false);
    }
    // One policy each: bodies stream (no buffer: a workload takes what it takes) and the upgrades' hour.
    const policiesOf = (name: string) =>
      docs.filter(
        (d) => d.kind === 'BackendTrafficPolicy' && (d.spec.targetRefs as Doc[]).some((t) => t.name === name),
      );
    const [ordinary, ...moreOrdinary] = policiesOf('port-hosts');
    expect(moreOrdinary).toEqual([]);
    expect(ordinary.spec.requestBuffer).toBeUndefined();
    expect(ordinary.spec.timeout.tcp.connectTimeout).toBe('5s');
    expect(ordinary.spec.timeout.http?.streamIdleTimeout).toBeUndefined();
    const [upgrades, ...moreUpgrades] = policiesOf('port-host-websockets');
    expect(moreUpgrades).toEqual([]);
    expect(upgrades.metadata.name).toBe('websockets');
    expect(upgrades.spec.httpUpgrade).toEqual([{ type: 'websocket' }, { type: 'tcp' }]);
    expect(ms(upgrades.spec.timeout.http.streamIdleTimeout)).toBe(3_600_000);
  });

  it('passes WebSocket upgrades on every routed path to its service, idle for up to an hour, ordinary requests not', () => {
    // Every prefix of the route table, matched with `Upgrade: websocket` (a header match outranks the same path
    // without one), to the same service: no list of WebSocket paths to keep in step.
    const upgrades: Record<string, { name: string; port: number }> = {};
    for (const rule of route('websockets').spec.rules as Doc[]) {
      expect(rule.timeouts, 'no limit on a whole stream').toEqual({ request: '0s' });
      expect(rule.filters).toBeUndefined();
      for (const m of rule.matches as Doc[]) {
        expect(m.path.type).toBe('PathPrefix');
        expect(m.headers).toEqual([{ type: 'RegularExpression', name: 'Upgrade', value: '(?i)websocket|tcp' }]);
        const upgrade = new RegExp(`^(?:${m.headers[0].value.replace('(?i)', '')})$`, 'i');
        expect(['WebSocket', 'tcp'].map((u) => upgrade.test(u))).toEqual([true, true]);
        expect(upgrade.test('h2c')).toBe(false);
        upgrades[m.path.value] = rule.backendRefs[0];
      }
      expect(rule.backendRefs).toHaveLength(1);
    }
    expect(attachedTo(route('websockets'), 'https')).toBe(true);
    expect(upgrades).toEqual(
      Object.fromEntries(
        (Object.entries(ROUTES) as [PlatformService, readonly string[]][]).flatMap(([service, prefixes]) =>
          prefixes.map((prefix) => [prefix, { name: service, port: SERVICE_PORTS[service] }]),
        ),
      ),
    );
    // Its one policy: upgrades on, no body buffer (Envoy's buffer would wait for the end of a stream), an hour's
    // stream idle timeout of its own, 5 s to connect, no retries.
    const policies = docs.filter(
      (d) => d.kind === 'BackendTrafficPolicy' && (d.spec.targetRefs as Doc[]).some((t) => t.name === 'websockets'),
    );
    expect(policies).toHaveLength(1);
    const policy = policies[0].spec;
    expect(policy.httpUpgrade).toEqual([{ type: 'websocket' }, { type: 'tcp' }]);
    expect(policy.requestBuffer).toBeUndefined();
    expect(policy.retry).toBeUndefined();
    expect(policy.timeout.tcp.connectTimeout).toBe('5s');
    expect(ms(policy.timeout.http.streamIdleTimeout)).toBe(3_600_000);
    // Ordinary requests keep the listener's shorter idle limit; a route whose bodies are buffered takes no upgrade
    // itself (Envoy Gateway turns upgrades off there), so every upgrade goes to the route above.
    const client = docs.find((d) => d.kind === 'ClientTrafficPolicy');
    expect(ms(client.spec.timeout.http.streamIdleTimeout)).toBeLessThan(3_600_000);
    for (const other of docs.filter((d) => d.kind === 'BackendTrafficPolicy' && d !== policies[0])) {
      if (other.spec.requestBuffer) expect(other.spec.httpUpgrade, other.metadata.name).toBeUndefined();
      expect(other.spec.timeout?.http?.streamIdleTimeout, other.metadata.name).toBeUndefined();
    }
  });

  it('lets long transfers run while bytes flow and bounds API calls, with no buffering of bodies', () => {
    for (const service of Object.keys(ROUTES)) {
      for (const rule of route(service).spec.rules as Doc[]) {
        const limit = ms(rule.timeouts.request);
        if (service === 'storage') expect(limit, 'no limit on a whole object transfer').toBe(0);
        else expect(limit > 0 && limit <= 120_000, `${service}: ${rule.timeouts.request}`).toBe(true);
      }
    }
    const client = docs.filter((d) => d.kind === 'ClientTrafficPolicy');
    expect(client).toHaveLength(1);
    expect(client[0].spec.targetRefs).toEqual([
      { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'platform' },
    ]);
    const http = client[0].spec.timeout.http;
    expect(http.requestReceivedTimeout, 'a 5 GB upload may take its time').toBeUndefined();
    expect(ms(http.streamIdleTimeout)).toBeGreaterThanOrEqual(60_000);
    expect(client[0].spec.headers.requestID).toBe('PreserveOrGenerate');
    // Envoy is the first hop: a client's own X-Forwarded-For is dropped before Envoy reads it, and the address Envoy
    // saw is the client (no hop trusted), the only address the services get.
    expect(client[0].spec.headers.earlyRequestHeaders.remove).toEqual(['X-Forwarded-For', 'X-Real-IP', 'Forwarded']);
    expect(client[0].spec.clientIPDetection).toEqual({ xForwardedFor: { numTrustedHops: 0 } });
    // Envoy holds a connection's buffer, never a streamed body, and the buffer is small.
    expect(client[0].spec.connection.bufferLimit).toMatch(/^\d+(Ki|Mi)$/);
    for (const policy of docs.filter((d) => d.kind === 'BackendTrafficPolicy')) {
      expect(policy.spec.retry, `${policy.metadata.name}: no retries of the gateway's own`).toBeUndefined();
    }
  });

  it("refuses a JSON API's body above the route table's limit itself, in the problem shape, and streams storage's", () => {
    const quantity = (q: string) =>
      Number(q.replace(/(Ki|Mi|Gi)$/, '')) * ({ Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 }[q.slice(-2)] ?? 1);
    const policies = docs.filter((d) => d.kind === 'BackendTrafficPolicy');
    for (const service of Object.keys(ROUTES) as PlatformService[]) {
      // Envoy Gateway applies one BackendTrafficPolicy to a route: exactly one names each.
      const applied = policies.filter((p) => (p.spec.targetRefs as Doc[]).some((t) => t.name === service));
      expect(
        applied.map((p) => p.metadata.name),
        service,
      ).toHaveLength(1);
      const policy = applied[0];
      expect(policy.spec.timeout.tcp.connectTimeout, service).toBe('5s');
      if (ROUTES[service].some((prefix) => UPLOAD_PREFIXES.includes(prefix))) {
        expect(policy.spec.requestBuffer, `${service}: bodies stream`).toBeUndefined();
        continue;
      }
      for (const prefix of ROUTES[service]) {
        expect(quantity(policy.spec.requestBuffer.limit), `${service} ${prefix}`).toBe(bodyLimitOf(`${prefix}/x`));
      }
      const tooLarge = (policy.spec.responseOverride as Doc[]).find((o) =>
        (o.match.statusCodes as Doc[]).some((c) => c.type === 'Value' && c.value === 413),
      );
      expect(tooLarge?.response.contentType, service).toBe('application/problem+json');
      expect(JSON.parse(tooLarge.response.body.inline)).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
    }
  });

  it("answers each service's health under its own prefix, to operators' addresses only", () => {
    const health = route('operators-health');
    const rules = health.spec.rules as Doc[];
    expect(rules.map((r) => r.matches[0].path)).toEqual(
      Object.keys(ROUTES).map((service) => ({ type: 'Exact', value: `/health/${service}` })),
    );
    for (const [i, service] of (Object.keys(ROUTES) as PlatformService[]).entries()) {
      expect(rules[i]!.filters).toEqual([
        { type: 'URLRewrite', urlRewrite: { path: { type: 'ReplaceFullPath', replaceFullPath: '/health' } } },
      ]);
      expect(rules[i]!.backendRefs).toEqual([{ name: service, port: SERVICE_PORTS[service] }]);
    }
    const guards = docs.filter(
      (d) =>
        d.kind === 'SecurityPolicy' &&
        (d.spec.targetRefs as Doc[]).some((t) => t.kind === 'HTTPRoute' && t.name === 'operators-health'),
    );
    expect(guards).toHaveLength(1);
    const authorization = guards[0].spec.authorization;
    expect(authorization.defaultAction).toBe('Deny');
    for (const rule of authorization.rules as Doc[]) {
      expect(rule.action).toBe('Allow');
      expect(rule.principal.clientCIDRs.length).toBeGreaterThan(0);
      for (const cidr of rule.principal.clientCIDRs) expect(cidr).not.toMatch(/^0\.0\.0\.0\/0$|^::\/0$/);
    }
    // Anyone else is refused in the platform's problem shape, as by pnpm start's gateway and compose's nginx.
    const policies = docs.filter(
      (d) =>
        d.kind === 'BackendTrafficPolicy' && (d.spec.targetRefs as Doc[]).some((t) => t.name === 'operators-health'),
    );
    expect(policies).toHaveLength(1);
    expect(policies[0].spec.timeout.tcp.connectTimeout).toBe('5s');
    const refused = (policies[0].spec.responseOverride as Doc[]).find((o) =>
      (o.match.statusCodes as Doc[]).some((c) => c.type === 'Value' && c.value === 403),
    );
    expect(refused?.response.contentType).toBe('application/problem+json');
    expect(JSON.parse(refused.response.body.inline)).toEqual({
      type: 'about:blank',
      title: 'Forbidden',
      status: 403,
      code: 'OPERATORS_ONLY',
      detail: "a service's health is for operators only",
    });
  });

  it('answers any other path with a problem in the platform shape', () => {
    const rule = route('not-found').spec.rules[0];
    expect(rule.matches).toEqual([{ path: { type: 'PathPrefix', value: '/' } }]);
    expect(rule.backendRefs).toBeUndefined();
    const ref = rule.filters[0].extensionRef;
    const filter = find(docs, ref.kind, ref.name);
    expect(filter.spec.directResponse).toMatchObject({ statusCode: 404, contentType: 'application/problem+json' });
    expect(JSON.parse(filter.spec.directResponse.body.inline)).toMatchObject({ status: 404, code: 'ROUTE_NOT_FOUND' });
  });

  it.each(overlays.map((o) => o.name))(
    "overlay %s: Envoy traces every request into the services' trace and keeps its metrics, which are scraped",
    (name) => {
      const rendered = render(path.join(k8sDir, 'overlays', name));
      const gateway = find(rendered, 'Gateway', 'platform');
      const ref = gateway.spec.infrastructure?.parametersRef;
      expect(ref).toEqual({ group: 'gateway.envoyproxy.io', kind: 'EnvoyProxy', name: 'platform' });
      const proxy = find(rendered, ref.kind, ref.name);
      expect(proxy?.metadata.namespace).toBe(gateway.metadata.namespace);
      const { tracing, metrics, requestID } = proxy.spec.telemetry;
      // OpenTelemetry, named as the other gateways name their spans, every trace Envoy begins recorded (the platform's
      // fraction is 1 by default), the request ID on each span.
      expect(tracing.provider).toMatchObject({ type: 'OpenTelemetry', serviceName: 'gateway' });
      expect(tracing.provider.backendRefs).toEqual([expect.objectContaining({ port: 4317 })]);
      expect(tracing.samplingRate).toBe(100);
      expect(tracing.customTags.request_id).toEqual({ type: 'RequestHeader', requestHeader: { name: 'x-request-id' } });
      // The caller's X-Request-ID reaches the service as sent: Envoy writes no trace decision into it.
      expect(requestID).toEqual({ tracing: 'Disable' });
      expect(metrics.prometheus?.disable).not.toBe(true);
    },
  );

  it("has the Prometheus Operator scrape the Gateway's Envoy proxies at their metrics port", () => {
    const monitoring = render(path.join(k8sDir, 'monitoring'));
    const monitor = find(monitoring, 'PodMonitor', 'platform-gateway');
    // The proxies Envoy Gateway runs for this Gateway (the labels the services' NetworkPolicies admit them by).
    expect(monitor.spec.namespaceSelector).toEqual({ matchNames: ['envoy-gateway-system'] });
    expect(monitor.spec.selector.matchLabels).toEqual({
      'app.kubernetes.io/name': 'envoy',
      'app.kubernetes.io/component': 'proxy',
      'gateway.envoyproxy.io/owning-gateway-name': find(docs, 'Gateway', 'platform').metadata.name,
    });
    expect(monitor.spec.podMetricsEndpoints).toEqual([{ port: 'metrics', path: '/stats/prometheus' }]);
  });
});
