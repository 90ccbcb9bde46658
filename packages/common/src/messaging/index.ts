export {
  type ConnectPublisherOptions,
  connectPublisher,
  type EventPublisher,
  NatsPublisher,
  NoopPublisher,
  type PublishOptions,
} from './publisher.ts';
export { type EnsureStreamOptions, ensureStream } from './stream.ts';
