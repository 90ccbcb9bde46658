/** What the billing routes are built from. */
import type { Logger } from '@gpu/common';
import type { BillingConfig } from '../config.ts';
import type { BillingContext } from '../domain/context.ts';

export interface RouteDeps {
  config: BillingConfig;
  logger: Logger;
  billing: BillingContext;
}
