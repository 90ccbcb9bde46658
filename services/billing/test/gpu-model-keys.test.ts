/** Billing's rate table and the platform's model keys agree: every priced model has the names drivers print. */
import { GPU_MODELS, gpuModelKey } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { defaultBaseRates } from '../src/config.ts';

describe('the default rate table', () => {
  it('prices every model by a key that real printed names map to', () => {
    const priced = Object.keys(defaultBaseRates).filter((k) => k !== 'default');
    for (const key of priced) {
      const model = GPU_MODELS.find((m) => m.key === key);
      expect(model?.printed.length, `no printed names known for ${key}`).toBeGreaterThan(0);
      for (const name of model!.printed) expect(gpuModelKey(name)).toBe(key);
    }
  });
});
