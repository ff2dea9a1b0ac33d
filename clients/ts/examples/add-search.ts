/**
 * The README example: add a memory, search for it, and read the ErrorInfo reason of a
 * refused delete.
 *
 *   npm run build && node dist/examples/add-search.js 127.0.0.1:50051
 */
import { call, createClient, errorDetails, isServiceError } from '../src';

async function main(address: string): Promise<void> {
  const client = createClient(address);
  try {
    const added = await call(client, 'AddMemory', {
      content: 'The user prefers short answers in British English.',
      type: 'MEMORY_TYPE_DIRECTIVE',
      importance: 8,
      tags: ['style'],
    });
    console.log(added.outcome, added.memory?.id);

    const found = await call(client, 'SearchMemories', {
      query: 'How should I phrase my replies?',
      limit: 3,
      filter: { tags_any: ['style'] },
    });
    for (const r of found.results) console.log(r.score?.final.toFixed(3), r.memory?.content);

    // Directives are protected: deleting one without `force` fails with a reason.
    try {
      await call(client, 'DeleteMemory', { id: added.memory?.id });
    } catch (err) {
      if (!isServiceError(err)) throw err;
      const e = errorDetails(err);
      console.log(e.codeName, e.reason); // FAILED_PRECONDITION ERROR_REASON_PROTECTED_MEMORY
    }
  } finally {
    client.close();
  }
}

main(process.argv[2] ?? '127.0.0.1:50051').catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
