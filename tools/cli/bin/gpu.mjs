#!/usr/bin/env node
// The `gpu` command: its TypeScript run through tsx, as the platform's other programs are in development.
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
