/**
 * V8 flags the storage service runs with: `pnpm start` (scripts/start.ts) and the benchmark take them from
 * here; the package's `start` script spells them out (test/node-flags.test.ts keeps it in step), and the image
 * (the repository's Dockerfile) runs the compiled program with that script's flags (scripts/lib/image.ts). The file
 * sits at the package root, outside `src/`, because the flags belong to how the process is started, not to the
 * service's code, and the repository's start script reads them.
 *
 * `--initial-old-space-size=64`: a download allocates about its own size in short-lived buffers (the HTTP
 * parser's copy of each chunk read from the store). Without the flag, about a third of service processes fell, at
 * some point in a download, into a full GC every ~100 ms that lasted as long as the download, 2-3x the service's
 * CPU per GiB (`--trace-gc`: 60-120 mark-compacts per 2-3 GiB, each started on the old generation's allocation
 * limit while the heap held ~25 MB against a ~49 MB limit). V8 counts external memory allocated since the last
 * full GC against that limit, and the buffers allocated during one marking appeared to survive until it ended, so
 * each marking started the next. With a 64 MB initial old generation none of 7 processes did so (nor 19 at
 * 96 MB); a download then ran 0-12 full GCs. The cost is memory: the service's peak RSS during a 1 GiB upload
 * rose from 165-174 MB to 182-187 MB.
 *
 * `--max-semi-space-size=8` wins that memory back: young-generation GCs here are triggered by the buffers'
 * bytes, not by the young generation filling up, so its default 16 MB semi-spaces only grew the RSS. With
 * both flags: peak RSS 169-173 MB during a 1 GiB upload, the same upload time, no full-GC runs in 3 of 3
 * processes, and 0.91-1.04 CPU s per GiB downloaded against 0.93-1.31 s with the first flag alone.
 */
export const STORAGE_NODE_FLAGS = ['--initial-old-space-size=64', '--max-semi-space-size=8'] as const;
