/**
 * Runs the shared engram.v1 contract scenarios (clients/scenarios/*.json) against a live
 * Engram server at ENGRAM_CONTRACT_ADDR with this package's client. `.venv/bin/pytest
 * tests/polyglot` starts a fresh server and runs this file. The rules (request mapping,
 * "$name" substitution, captures, canonical observations, subset matching) are the same as
 * in the Python runner (tests/polyglot/scenario.py) and the Go one (clients/go/contract).
 */
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import * as grpc from '@grpc/grpc-js';

import type { MemoryServiceClient } from '../src';
import { call, createClient, errorDetails, isServiceError } from '../src';
import type { Memory__Output as Memory } from '../src/gen/engram/v1/Memory';
import type { ExportMemoriesResponse__Output as ExportChunk } from '../src/gen/engram/v1/ExportMemoriesResponse';
import type { ImportMemoriesResponse__Output as ImportResult } from '../src/gen/engram/v1/ImportMemoriesResponse';

/** The chunks of a server-streaming ExportMemories call, in order. */
function exportChunks(client: MemoryServiceClient, request: object, timeoutMs = 30_000): Promise<ExportChunk[]> {
  return new Promise((resolve, reject) => {
    const chunks: ExportChunk[] = [];
    const stream = client.ExportMemories(request, new grpc.Metadata(), { deadline: Date.now() + timeoutMs });
    stream.on('data', (chunk: ExportChunk) => chunks.push(chunk));
    stream.on('error', reject);
    stream.on('end', () => resolve(chunks));
  });
}

/** A client-streaming ImportMemories call of one message. */
function importOne(client: MemoryServiceClient, request: object, timeoutMs = 30_000): Promise<ImportResult> {
  return new Promise((resolve, reject) => {
    const stream = client.ImportMemories(
      new grpc.Metadata(),
      { deadline: Date.now() + timeoutMs },
      (err: grpc.ServiceError | null, res?: ImportResult) => {
        if (err) reject(err);
        else if (res === undefined) reject(new Error('import without an answer'));
        else resolve(res);
      },
    );
    stream.write(request);
    stream.end();
  });
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

interface Step {
  name: string;
  call: string;
  capture?: string;
  request: Json;
  expect: Json;
}

interface Scenario {
  scenario: string;
  steps: Step[];
}

const addr = process.env.ENGRAM_CONTRACT_ADDR;
const scenarioPath =
  process.env.ENGRAM_CONTRACT_SCENARIO ?? path.resolve(__dirname, '..', '..', '..', 'scenarios', 'contract_v1.json');

class Runner {
  readonly captured = new Map<string, string>(); // name -> id
  readonly names = new Map<string, string>(); // id -> name

  constructor(private readonly client: MemoryServiceClient) {}

  substitute(value: Json): Json {
    if (typeof value === 'string' && value.startsWith('$')) {
      const id = this.captured.get(value.slice(1));
      if (id === undefined) throw new Error(`${value} was never captured`);
      return id;
    }
    if (Array.isArray(value)) return value.map((v) => this.substitute(v));
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.substitute(v)]));
    }
    return value;
  }

  name(id: string): string {
    return id ? (this.names.get(id) ?? '?') : '';
  }

  capture(name: string | undefined, memory: Memory | null): void {
    if (name && memory) {
      this.captured.set(name, memory.id);
      this.names.set(memory.id, name);
    }
  }

  memory(m: Memory | null): Obj {
    if (m === null) throw new Error('response without a memory');
    return {
      id: this.name(m.id),
      collection: m.collection,
      type: m.type,
      content: m.content,
      importance: m.importance,
      tags: [...m.tags].sort(),
      version: m.version,
      source: m.source,
      source_type: m.source_type,
      superseded_by: this.name(m.superseded_by),
    };
  }

  ids(memories: (Memory | null)[]): Obj {
    const names = memories.map((m) => this.name(m?.id ?? ''));
    return { ids: names, id_set: [...names].sort(), top: names[0] ?? '' };
  }

  sortedNames(memories: Memory[]): string[] {
    return memories.map((m) => this.name(m.id)).sort();
  }

  async step(step: Step): Promise<Obj> {
    const request = this.substitute(step.request) as Obj;
    const c = this.client;
    try {
      switch (step.call) {
        case 'AddMemory': {
          const r = await call(c, 'AddMemory', request);
          this.capture(step.capture, r.memory);
          return {
            outcome: r.outcome,
            memory: this.memory(r.memory),
            near_duplicates: r.near_duplicates.map((s) => this.name(s.id)),
            replayed: r.replayed,
            conflicts: r.conflicts.map((x) => ({
              memory: this.name(x.memory_id),
              basis: x.basis,
              superseded: x.superseded,
            })),
          };
        }
        case 'RunConsolidation': {
          const r = await call(c, 'RunConsolidation', request);
          return {
            outcome: r.outcome,
            memories_before: r.memories_before,
            memories_after: r.memories_after,
            clusters: r.clusters.map((x) => ({
              sources: x.source_ids.map((id) => this.name(id)).sort(),
              merged_by: x.merged_by,
            })),
          };
        }
        case 'SearchMemories': {
          const r = await call(c, 'SearchMemories', request);
          return this.ids(r.results.map((res) => res.memory));
        }
        case 'UpdateMemory': {
          const r = await call(c, 'UpdateMemory', request);
          this.capture(step.capture, r.memory);
          return {
            memory: this.memory(r.memory),
            previous: this.memory(r.previous),
            changed: r.changed,
            dry_run: r.dry_run,
          };
        }
        case 'DeleteMemory': {
          const r = await call(c, 'DeleteMemory', request);
          return { deleted: this.sortedNames(r.deleted), dry_run: r.dry_run };
        }
        case 'GetMemory': {
          const r = await call(c, 'GetMemory', request);
          this.capture(step.capture, r.memory);
          return { memory: this.memory(r.memory), history: r.history.map((m) => this.memory(m)) };
        }
        case 'ListMemories': {
          const r = await call(c, 'ListMemories', request);
          return { id_set: this.sortedNames(r.memories) };
        }
        case 'ListCollections': {
          const r = await call(c, 'ListCollections', request);
          const cols = [...r.collections].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
          return { collections: cols.map((col) => ({ name: col.name, memory_count: Number(col.memory_count) })) };
        }
        case 'DeleteCollection': {
          const r = await call(c, 'DeleteCollection', request);
          return { deleted_count: Number(r.deleted_count) };
        }
        case 'ExtractMemories': {
          // extracted memories are never captured: no ids
          const r = await call(c, 'ExtractMemories', request);
          return {
            extractor: r.extractor,
            deduplicated: r.deduplicated,
            dry_run: r.dry_run,
            redactions: [...r.redactions],
            memories: r.memories.map((x) => ({
              content: x.content,
              type: x.type,
              importance: x.importance,
              tags: [...x.tags].sort(),
              outcome: x.result ? x.result.outcome : '',
            })),
          };
        }
        case 'ListTrash': {
          const r = await call(c, 'ListTrash', request);
          return { id_set: this.sortedNames(r.memories) };
        }
        case 'RestoreMemory': {
          const r = await call(c, 'RestoreMemory', request);
          return { memory: this.memory(r.memory), near_duplicates: r.near_duplicates.map((s) => this.name(s.id)) };
        }
        case 'PurgeTrash': {
          const r = await call(c, 'PurgeTrash', request);
          return { purged_count: Number(r.purged_count) };
        }
        case 'RestoreCollection': {
          const r = await call(c, 'RestoreCollection', request);
          if (r.collection === null) throw new Error('response without a collection');
          return { name: r.collection.name, memory_count: Number(r.collection.memory_count) };
        }
        case 'GetContext': {
          // The Markdown holds dates: its parts are compared instead.
          const r = await call(c, 'GetContext', request);
          return {
            sections: r.sections.map((x) => ({
              kind: x.kind,
              ids: x.items.filter((i) => i.memory && i.memory.id).map((i) => this.name(i.memory?.id ?? '')),
              slots: x.items.filter((i) => i.slot).map((i) => i.slot),
              triggers: x.items.filter((i) => i.trigger).map((i) => i.trigger),
            })),
            token_budget: r.token_budget,
            within_budget: r.tokens_used > 0 && r.tokens_used <= r.token_budget,
            tokenizer: r.tokenizer,
            since_source: r.since_source,
            last_session_id: r.last_session_id,
          };
        }
        case 'GetTriggers': {
          const r = await call(c, 'GetTriggers', request);
          return { action: r.action, matched: [...r.matched], ids: r.memories.map((m) => this.name(m.id)) };
        }
        case 'ListSlots': {
          const r = await call(c, 'ListSlots', request);
          return { slots: r.slots.map((x) => ({ name: x.name, content: x.content })) };
        }
        case 'UpdateSlot': {
          const r = await call(c, 'UpdateSlot', request);
          return {
            slot: { name: r.slot?.name ?? '', content: r.slot?.content ?? '' },
            compaction: r.compaction,
          };
        }
        case 'ListTopics': {
          const r = await call(c, 'ListTopics', request);
          // topic ids are minted by the server: the first (largest) one is captured by name
          const first = r.topics[0];
          if (step.capture && first) {
            this.captured.set(step.capture, first.id);
            this.names.set(first.id, step.capture);
          }
          return {
            memory_count: r.memory_count,
            topic_count: r.topic_count,
            size_sum: r.topics.reduce((n, t) => n + t.size, 0),
            first: first ? this.name(first.id) : '',
          };
        }
        case 'GetTopic': {
          const r = await call(c, 'GetTopic', request);
          if (r.topic === null) throw new Error('response without a topic');
          return {
            topic: { id: this.name(r.topic.id), size: r.topic.size },
            all_on_page: r.memories.length === r.topic.size && r.next_page_token === '',
          };
        }
        case 'ExportMemories': {
          // Server-streaming: the file is the chunks' data in order.
          const chunks = await exportChunks(c, request);
          const last = chunks[chunks.length - 1];
          if (last === undefined) throw new Error('export without a chunk');
          const data = Buffer.concat(chunks.map((x) => new Uint8Array(x.data)));
          if (step.capture) this.captured.set(step.capture, data.toString('base64'));
          return {
            memories_done: Number(last.memories_done),
            memories_total: Number(last.memories_total),
            lines: data
              .toString('utf8')
              .split('\n')
              .filter((line) => line.trim() !== '').length,
          };
        }
        case 'ImportMemories': {
          // Client-streaming, sent as one message (proto3 JSON: bytes as base64).
          const r = await importOne(c, request);
          return {
            lines: Number(r.lines),
            created: Number(r.created),
            replaced: Number(r.replaced),
            unchanged: Number(r.unchanged),
            duplicates: Number(r.duplicates),
            collections: [...r.collections].sort(),
          };
        }
        default:
          throw new Error(`unknown call ${step.call}`);
      }
    } catch (err) {
      if (!isServiceError(err)) throw err;
      const d = errorDetails(err);
      const metadata: Obj = {};
      for (const key of Object.keys(d.metadata).sort()) {
        const value = d.metadata[key] ?? '';
        metadata[key] = this.names.get(value) ?? value;
      }
      return {
        error: {
          code: d.codeName,
          reason: d.reason,
          domain: d.domain,
          metadata,
          field_violations: [...new Set(d.fieldViolations.map((v) => v.field))].sort(),
        },
      };
    }
  }
}

/** Where `expected` is not a subset of `observed` (the shared matching rule). */
export function mismatches(expected: Json, observed: Json | undefined, where = '$'): string[] {
  const show = (v: Json | undefined): string => JSON.stringify(v);
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    if (observed === null || typeof observed !== 'object' || Array.isArray(observed)) {
      return [`${where}: expected an object, got ${show(observed)}`];
    }
    return Object.keys(expected).flatMap((key) =>
      key in observed
        ? mismatches(expected[key] as Json, observed[key], `${where}.${key}`)
        : [`${where}.${key}: missing`],
    );
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(observed) || observed.length !== expected.length) {
      return [`${where}: expected ${show(expected)}, got ${show(observed)}`];
    }
    return expected.flatMap((e, i) => mismatches(e, observed[i], `${where}[${i}]`));
  }
  return expected === observed ? [] : [`${where}: expected ${show(expected)}, got ${show(observed)}`];
}

test(
  'contract scenario',
  { skip: addr ? false : 'ENGRAM_CONTRACT_ADDR is not set; run `.venv/bin/pytest tests/polyglot` from the repository root' },
  async () => {
    const scenario = JSON.parse(fs.readFileSync(scenarioPath, 'utf8')) as Scenario;
    const client = createClient(addr as string);
    const runner = new Runner(client);
    const transcript: { step: string; observed: Obj }[] = [];
    try {
      for (const step of scenario.steps) {
        const observed = await runner.step(step);
        transcript.push({ step: step.name, observed });
        const problems = mismatches(step.expect, observed);
        assert.deepEqual(
          problems,
          [],
          `${scenario.scenario}, step "${step.name}":\n${problems.join('\n')}\nobserved: ${JSON.stringify(observed)}`,
        );
      }
    } finally {
      client.close();
      const out = process.env.ENGRAM_CONTRACT_TRANSCRIPT;
      if (out) fs.writeFileSync(out, JSON.stringify(transcript, null, 2));
    }
  },
);
