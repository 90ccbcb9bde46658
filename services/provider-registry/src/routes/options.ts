/** What the provider routes are built with (app.ts registers them with one value of it). */
import type { RegistryService } from '../domain/registry-service.ts';
import type { JsonArraySender } from './json-array.ts';

export interface ProviderRoutesOptions {
  registry: RegistryService;
  /** Sends discovery pages from the app's pool of reusable buffers. */
  pages: JsonArraySender;
}
