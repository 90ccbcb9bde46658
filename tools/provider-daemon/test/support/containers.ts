/**
 * Container mode as the test setup (scripts/test-env.sh) made it possible: Podman, the global flags this host needs,
 * and a busybox image already on the machine.
 */
export const testImage = process.env.TEST_CONTAINER_IMAGE ?? 'localhost/gpu-platform-test:2';
export const testRuntimeArgs = (process.env.TEST_CONTAINER_RUNTIME_ARGS ?? '').split(' ').filter(Boolean);

/** A daemon's `workloads` settings for it (the test image is the machine's own: no registry is reachable here). */
export const containerSettings = {
  container_runtime: 'podman',
  container_runtime_args: testRuntimeArgs,
  allowed_registries: ['localhost'],
};
