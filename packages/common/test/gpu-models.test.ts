/** Model keys from the names real drivers print, for every model in billing's rate table. */
import { describe, expect, it } from 'vitest';
import { GPU_MODELS, gpuModelKey, spellModelKey } from '../src/gpu-models.ts';
import { DEFAULT_BASE_RATES } from '../src/gpu-rates.ts';

describe('GPU model keys', () => {
  it.each(GPU_MODELS.flatMap((m) => m.printed.map((name) => [name, m.key])))('%s → %s', (name, key) => {
    expect(gpuModelKey(name)).toBe(key);
  });

  it('reads the names nvidia-smi printed on real H100 and H200 machines', () => {
    // tools/provider-daemon/test/fixtures/nvidia-smi: driver 580.159.04.
    expect(gpuModelKey('NVIDIA H100 80GB HBM3')).toBe('nvidia-tesla-h100');
    expect(gpuModelKey('NVIDIA H200')).toBe('nvidia-h200');
  });

  it('accepts the keys themselves and the short names people type', () => {
    for (const { key } of GPU_MODELS) expect(gpuModelKey(key)).toBe(key);
    expect(gpuModelKey('h100')).toBe('nvidia-tesla-h100');
    expect(gpuModelKey('RTX 4090')).toBe('nvidia-geforce-rtx-4090');
    expect(gpuModelKey('a100_80gb')).toBe('nvidia-tesla-a100');
  });

  it('keeps different products apart, and spells unknown models out', () => {
    expect(gpuModelKey('NVIDIA GeForce RTX 4090 D')).toBe('nvidia-geforce-rtx-4090-d');
    expect(gpuModelKey('NVIDIA GeForce RTX 4080 SUPER')).toBe('nvidia-geforce-rtx-4080-super');
    expect(gpuModelKey('NVIDIA GeForce RTX 3090 Ti')).toBe('nvidia-geforce-rtx-3090-ti');
    expect(gpuModelKey('NVIDIA L40S')).toBe('nvidia-l40s');
    expect(gpuModelKey('  NVIDIA  B200_ ')).toBe('nvidia-b200');
    expect(spellModelKey('NVIDIA GeForce RTX 4090')).toBe('nvidia-geforce-rtx-4090');
  });

  it('the shipped rate table prices every model by a key that real printed names map to', () => {
    const priced = Object.keys(DEFAULT_BASE_RATES).filter((k) => k !== 'default');
    expect(priced.length).toBeGreaterThan(0);
    for (const key of priced) {
      const model = GPU_MODELS.find((m) => m.key === key);
      expect(model?.printed.length, `no printed names known for ${key}`).toBeGreaterThan(0);
      for (const name of model!.printed) expect(gpuModelKey(name)).toBe(key);
    }
    // And every model the platform knows by name has a rate of its own.
    expect(GPU_MODELS.map((m) => m.key).filter((k) => !(k in DEFAULT_BASE_RATES))).toEqual([]);
  });
});
