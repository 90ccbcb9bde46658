/**
 * GPU model names, one place for the whole platform. Drivers print long names (`nvidia-smi` says
 * `NVIDIA H100 80GB HBM3`, `NVIDIA A100-SXM4-80GB`, `Tesla V100-SXM2-16GB`); the platform prices and filters by a
 * model key (billing's rate table: `nvidia-tesla-h100`, `nvidia-geforce-rtx-4090`, ...). `gpuModelKey` turns any
 * printed name into its key: a known model by its family (every memory size and form factor of an H100 is an H100),
 * anything else by spelling (lower case, runs of spaces, underscores and hyphens as one `-`), so an operator can still
 * price an unknown model by adding its spelt-out key to the rate table.
 *
 * Variants that are different products keep their own keys and do not fall into their base model's: an
 * `RTX 4090 D`, `RTX 4080 SUPER` or `RTX 3090 Ti` is not priced as the base card.
 */

export interface GpuModel {
  /** The key in billing's rate table. */
  key: string;
  /** Matched against the name in lower case with `-` and `_` read as spaces. */
  pattern: RegExp;
  /** Names real drivers print for it (nvidia-smi, rocm-smi), tested. */
  printed: readonly string[];
}

export const GPU_MODELS: readonly GpuModel[] = [
  {
    key: 'nvidia-tesla-h100',
    pattern: /\bh100\b/,
    printed: ['NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe', 'NVIDIA H100 NVL', 'NVIDIA H100'],
  },
  { key: 'nvidia-h200', pattern: /\bh200\b/, printed: ['NVIDIA H200', 'NVIDIA H200 NVL'] },
  {
    key: 'nvidia-tesla-a100',
    pattern: /\ba100\b/,
    printed: ['NVIDIA A100-SXM4-80GB', 'NVIDIA A100-SXM4-40GB', 'NVIDIA A100-PCIE-40GB', 'NVIDIA A100 80GB PCIe'],
  },
  {
    key: 'nvidia-tesla-v100',
    pattern: /\bv100\b/,
    printed: ['Tesla V100-SXM2-16GB', 'Tesla V100-SXM2-32GB', 'Tesla V100-PCIE-32GB', 'Tesla V100-PCIE-16GB'],
  },
  { key: 'nvidia-tesla-l40', pattern: /\bl40\b/, printed: ['NVIDIA L40'] },
  { key: 'nvidia-geforce-rtx-4090', pattern: /\brtx 4090\b(?! d\b)/, printed: ['NVIDIA GeForce RTX 4090'] },
  {
    key: 'nvidia-geforce-rtx-4080',
    pattern: /\brtx 4080\b(?! super\b)/,
    printed: ['NVIDIA GeForce RTX 4080'],
  },
  {
    key: 'nvidia-geforce-rtx-4070',
    pattern: /\brtx 4070\b(?! (ti|super)\b)/,
    printed: ['NVIDIA GeForce RTX 4070'],
  },
  { key: 'nvidia-geforce-rtx-3090', pattern: /\brtx 3090\b(?! ti\b)/, printed: ['NVIDIA GeForce RTX 3090'] },
  { key: 'nvidia-geforce-rtx-3080', pattern: /\brtx 3080\b(?! ti\b)/, printed: ['NVIDIA GeForce RTX 3080'] },
  {
    key: 'amd-radeon-rx-7900-xtx',
    pattern: /\brx 7900 xtx\b/,
    printed: ['AMD Radeon RX 7900 XTX', 'Radeon RX 7900 XTX'],
  },
  {
    key: 'amd-instinct-mi250x',
    pattern: /\bmi250x\b/,
    printed: ['AMD Instinct MI250X', 'AMD Instinct MI250X/MI250'],
  },
];

/** A name spelt as a key: `NVIDIA GeForce RTX 4090` → `nvidia-geforce-rtx-4090`. */
export function spellModelKey(name: string): string {
  return name
    .trim()
    .toLowerCase()
    .replace(/[\s_-]+/g, '-')
    .replace(/^-|-$/g, '');
}

/** The model key of a GPU name as a driver, a provider or a renter writes it. */
export function gpuModelKey(name: string): string {
  const words = name
    .toLowerCase()
    .replace(/[-_/]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  for (const model of GPU_MODELS) if (model.pattern.test(words)) return model.key;
  return spellModelKey(name);
}
