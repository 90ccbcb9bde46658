/** Where billing asks who owns a provider machine (the provider registry: adapters/provider-registry.ts). */
export interface ProviderDirectory {
  /**
   * The user who owns the provider machine, or null when the registry does not know it. Throws an `unavailable`
   * error (503) when the registry cannot be asked.
   */
  ownerOf(providerId: string, correlationId?: string): Promise<string | null>;
}
