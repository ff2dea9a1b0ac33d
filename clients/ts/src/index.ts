/**
 * A TypeScript client for Engram's gRPC API (engram.v1).
 *
 * The service is loaded at run time from the .proto files with @grpc/proto-loader, so there
 * is no generated runtime code to keep in sync; `npm run gen-types` derives the TypeScript
 * types (src/gen, not committed) from the same files. Errors are decoded from the
 * google.rpc.Status in the `grpc-status-details-bin` trailer.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import * as protobuf from 'protobufjs';

import type { MemoryServiceClient } from './gen/engram/v1/MemoryService';
import type { ProtoGrpcType } from './gen/memory_service';
import type { AddMemoryRequest } from './gen/engram/v1/AddMemoryRequest';
import type { AddMemoryResponse__Output } from './gen/engram/v1/AddMemoryResponse';
import type { SearchMemoriesRequest } from './gen/engram/v1/SearchMemoriesRequest';
import type { SearchMemoriesResponse__Output } from './gen/engram/v1/SearchMemoriesResponse';
import type { UpdateMemoryRequest } from './gen/engram/v1/UpdateMemoryRequest';
import type { UpdateMemoryResponse__Output } from './gen/engram/v1/UpdateMemoryResponse';
import type { DeleteMemoryRequest } from './gen/engram/v1/DeleteMemoryRequest';
import type { DeleteMemoryResponse__Output } from './gen/engram/v1/DeleteMemoryResponse';
import type { GetMemoryRequest } from './gen/engram/v1/GetMemoryRequest';
import type { GetMemoryResponse__Output } from './gen/engram/v1/GetMemoryResponse';
import type { ListMemoriesRequest } from './gen/engram/v1/ListMemoriesRequest';
import type { ListMemoriesResponse__Output } from './gen/engram/v1/ListMemoriesResponse';
import type { ListCollectionsRequest } from './gen/engram/v1/ListCollectionsRequest';
import type { ListCollectionsResponse__Output } from './gen/engram/v1/ListCollectionsResponse';
import type { DeleteCollectionRequest } from './gen/engram/v1/DeleteCollectionRequest';
import type { DeleteCollectionResponse__Output } from './gen/engram/v1/DeleteCollectionResponse';
import type { RunReflectionRequest } from './gen/engram/v1/RunReflectionRequest';
import type { RunReflectionResponse__Output } from './gen/engram/v1/RunReflectionResponse';
import type { ExtractMemoriesRequest } from './gen/engram/v1/ExtractMemoriesRequest';
import type { ExtractMemoriesResponse__Output } from './gen/engram/v1/ExtractMemoriesResponse';
import type { ListTrashRequest } from './gen/engram/v1/ListTrashRequest';
import type { ListTrashResponse__Output } from './gen/engram/v1/ListTrashResponse';
import type { RestoreMemoryRequest } from './gen/engram/v1/RestoreMemoryRequest';
import type { RestoreMemoryResponse__Output } from './gen/engram/v1/RestoreMemoryResponse';
import type { PurgeTrashRequest } from './gen/engram/v1/PurgeTrashRequest';
import type { PurgeTrashResponse__Output } from './gen/engram/v1/PurgeTrashResponse';
import type { RestoreCollectionRequest } from './gen/engram/v1/RestoreCollectionRequest';
import type { RestoreCollectionResponse__Output } from './gen/engram/v1/RestoreCollectionResponse';
import type { ListGateDecisionsRequest } from './gen/engram/v1/ListGateDecisionsRequest';
import type { ListGateDecisionsResponse__Output } from './gen/engram/v1/ListGateDecisionsResponse';
import type { GetContextRequest } from './gen/engram/v1/GetContextRequest';
import type { GetContextResponse__Output } from './gen/engram/v1/GetContextResponse';
import type { GetTriggersRequest } from './gen/engram/v1/GetTriggersRequest';
import type { GetTriggersResponse__Output } from './gen/engram/v1/GetTriggersResponse';
import type { ListSlotsRequest } from './gen/engram/v1/ListSlotsRequest';
import type { ListSlotsResponse__Output } from './gen/engram/v1/ListSlotsResponse';
import type { UpdateSlotRequest } from './gen/engram/v1/UpdateSlotRequest';
import type { UpdateSlotResponse__Output } from './gen/engram/v1/UpdateSlotResponse';
import type { RunConsolidationRequest } from './gen/engram/v1/RunConsolidationRequest';
import type { RunConsolidationResponse__Output } from './gen/engram/v1/RunConsolidationResponse';
import type { ListTopicsRequest } from './gen/engram/v1/ListTopicsRequest';
import type { ListTopicsResponse__Output } from './gen/engram/v1/ListTopicsResponse';
import type { GetTopicRequest } from './gen/engram/v1/GetTopicRequest';
import type { GetTopicResponse__Output } from './gen/engram/v1/GetTopicResponse';

export type { MemoryServiceClient } from './gen/engram/v1/MemoryService';
export type { Memory__Output as Memory } from './gen/engram/v1/Memory';

/** proto-loader options; `npm run gen-types` uses the same ones, so the types match. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

export const DETAILS_TRAILER = 'grpc-status-details-bin';

/** The repository's proto/ directory (override with ENGRAM_PROTO_DIR). */
export function defaultProtoDir(): string {
  return process.env.ENGRAM_PROTO_DIR ?? path.resolve(__dirname, '..', '..', '..', '..', 'proto');
}

export interface ClientOptions {
  protoDir?: string;
  credentials?: grpc.ChannelCredentials;
  channelOptions?: grpc.ChannelOptions;
}

/** A MemoryService client for `address` ("host:port"), plaintext unless credentials are given. */
export function createClient(address: string, options: ClientOptions = {}): MemoryServiceClient {
  const protoDir = options.protoDir ?? defaultProtoDir();
  const definition = protoLoader.loadSync('engram/v1/memory_service.proto', {
    ...LOADER_OPTIONS,
    includeDirs: [protoDir],
  });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;
  return new loaded.engram.v1.MemoryService(
    address,
    options.credentials ?? grpc.credentials.createInsecure(),
    options.channelOptions,
  );
}

/** Request and response types of every MemoryService RPC. */
export interface Rpcs {
  AddMemory: [AddMemoryRequest, AddMemoryResponse__Output];
  SearchMemories: [SearchMemoriesRequest, SearchMemoriesResponse__Output];
  UpdateMemory: [UpdateMemoryRequest, UpdateMemoryResponse__Output];
  DeleteMemory: [DeleteMemoryRequest, DeleteMemoryResponse__Output];
  GetMemory: [GetMemoryRequest, GetMemoryResponse__Output];
  ListMemories: [ListMemoriesRequest, ListMemoriesResponse__Output];
  ListCollections: [ListCollectionsRequest, ListCollectionsResponse__Output];
  DeleteCollection: [DeleteCollectionRequest, DeleteCollectionResponse__Output];
  RunReflection: [RunReflectionRequest, RunReflectionResponse__Output];
  ExtractMemories: [ExtractMemoriesRequest, ExtractMemoriesResponse__Output];
  ListTrash: [ListTrashRequest, ListTrashResponse__Output];
  RestoreMemory: [RestoreMemoryRequest, RestoreMemoryResponse__Output];
  PurgeTrash: [PurgeTrashRequest, PurgeTrashResponse__Output];
  RestoreCollection: [RestoreCollectionRequest, RestoreCollectionResponse__Output];
  ListGateDecisions: [ListGateDecisionsRequest, ListGateDecisionsResponse__Output];
  GetContext: [GetContextRequest, GetContextResponse__Output];
  GetTriggers: [GetTriggersRequest, GetTriggersResponse__Output];
  ListSlots: [ListSlotsRequest, ListSlotsResponse__Output];
  UpdateSlot: [UpdateSlotRequest, UpdateSlotResponse__Output];
  RunConsolidation: [RunConsolidationRequest, RunConsolidationResponse__Output];
  ListTopics: [ListTopicsRequest, ListTopicsResponse__Output];
  GetTopic: [GetTopicRequest, GetTopicResponse__Output];
}

type Callback = (err: grpc.ServiceError | null, res?: unknown) => void;
type UnaryFn = (request: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, cb: Callback) => unknown;

/** Promise wrapper for a unary call: `await call(client, 'AddMemory', {...})`. */
export function call<K extends keyof Rpcs>(
  client: MemoryServiceClient,
  method: K,
  request: Rpcs[K][0],
  timeoutMs = 30_000,
): Promise<Rpcs[K][1]> {
  const fn = client[method] as unknown as UnaryFn;
  return new Promise((resolve, reject) => {
    fn.call(client, request, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err) reject(err);
      else resolve(res as Rpcs[K][1]);
    });
  });
}

export interface FieldViolation {
  field: string;
  description: string;
}

/** What an Engram error carries: the gRPC status and the google.rpc details. */
export interface EngramErrorDetails {
  code: grpc.status;
  /** The canonical code name, e.g. "FAILED_PRECONDITION". */
  codeName: string;
  message: string;
  /** ErrorInfo.reason: an ErrorReason value name, e.g. "ERROR_REASON_PROTECTED_MEMORY". */
  reason: string;
  /** ErrorInfo.domain: "engram.v1". */
  domain: string;
  metadata: Record<string, string>;
  /** BadRequest field violations (invalid arguments). */
  fieldViolations: FieldViolation[];
}

let rpcTypes: { status: protobuf.Type; errorInfo: protobuf.Type; badRequest: protobuf.Type } | undefined;

function googleRpcTypes(): NonNullable<typeof rpcTypes> {
  if (rpcTypes === undefined) {
    const protos = path.dirname(require.resolve('google-proto-files/package.json'));
    const root = new protobuf.Root();
    root.resolvePath = (origin: string, target: string): string => {
      const candidate = path.join(protos, target);
      return fs.existsSync(candidate) ? candidate : protobuf.util.path.resolve(origin, target);
    };
    root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
    rpcTypes = {
      status: root.lookupType('google.rpc.Status'),
      errorInfo: root.lookupType('google.rpc.ErrorInfo'),
      badRequest: root.lookupType('google.rpc.BadRequest'),
    };
  }
  return rpcTypes;
}

interface AnyMessage {
  type_url: string;
  value: Uint8Array;
}

/** Decode the google.rpc.Status of a failed call (ErrorInfo and BadRequest details). */
export function errorDetails(err: grpc.ServiceError): EngramErrorDetails {
  const out: EngramErrorDetails = {
    code: err.code,
    codeName: grpc.status[err.code] ?? String(err.code),
    message: err.details,
    reason: '',
    domain: '',
    metadata: {},
    fieldViolations: [],
  };
  const raw = err.metadata?.get(DETAILS_TRAILER)[0];
  if (raw === undefined || typeof raw === 'string') return out;
  const types = googleRpcTypes();
  const status = types.status.toObject(types.status.decode(Uint8Array.from(raw)), { defaults: true }) as {
    code: number;
    details: AnyMessage[];
  };
  if (status.code !== err.code) {
    throw new Error(`google.rpc.Status code ${status.code} differs from the gRPC status ${err.code}`);
  }
  for (const detail of status.details) {
    const typeName = detail.type_url.slice(detail.type_url.lastIndexOf('/') + 1);
    if (typeName === 'google.rpc.ErrorInfo') {
      const info = types.errorInfo.toObject(types.errorInfo.decode(detail.value), { defaults: true }) as {
        reason: string;
        domain: string;
        metadata: Record<string, string>;
      };
      out.reason = info.reason;
      out.domain = info.domain;
      out.metadata = { ...info.metadata };
    } else if (typeName === 'google.rpc.BadRequest') {
      const bad = types.badRequest.toObject(types.badRequest.decode(detail.value), { defaults: true }) as {
        field_violations: FieldViolation[];
      };
      out.fieldViolations = bad.field_violations.map((v) => ({ field: v.field, description: v.description }));
    }
  }
  return out;
}

/** True for the errors a gRPC call rejects with. */
export function isServiceError(err: unknown): err is grpc.ServiceError {
  return err instanceof Error && typeof (err as Partial<grpc.ServiceError>).code === 'number';
}
