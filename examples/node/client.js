'use strict';
// A kanal client in Node.js, written from the .proto files and the vector files alone:
//   node client.js --bootstrap HOST:PORT --topic TOPIC [--records N] [--group G] [--proto-dir DIR]
//                  [--tls-ca-file CA.pem [--user NAME] [--tls-cert-file F --tls-key-file F]]
//   with --user, the password comes from $KANAL_PASSWORD (never the command line, which others can read)
//
// 1. Metadata: the topic's partitions, their leaders and leader epochs.
// 2. InitProducerId, then Produce (acks=all) of N keyed records in two rounds, one batch per partition and
//    round: the first uncompressed, the second gzip. key -> partition is murmur3_x86_32(key, seed 0) %
//    partitions (records.proto). The batches are idempotent (producer id, epoch, sequences per partition).
// 3. The first round's request again, as a retry after a lost reply would send it: the broker must answer
//    NONE with the original offsets and store nothing (broker.proto, ProduceResponse).
// 4. Fetch every partition from its log start (ListOffsets -2) to its high-water mark, checking both CRCs
//    and decoding the records; then one Fetch at an offset inside a batch, which returns the whole batch
//    from its base offset (the client skips the records below its fetch offset).
// 5. With --group: the group's coordinator (FindCoordinator, found again on NOT_COORDINATOR, asked again
//    on COORDINATOR_LOAD_IN_PROGRESS: src/coordinator.js), JoinGroup (twice: a new member's first join is
//    MEMBER_ID_REQUIRED), SyncGroup as the leader taking every partition, OffsetCommit of each partition's
//    high-water mark, OffsetFetch to read them back, LeaveGroup.
//
// Security (broker.proto, "Authentication"): --tls-ca-file for TLS; --user with $KANAL_PASSWORD for a
// password (metadata keys kanal-user-bin / kanal-password-bin, src/kanal.js); a client certificate with
// --tls-cert-file and --tls-key-file where the listener asks for one.
//
// Prints one JSON object per line: {"event": "metadata" | "produced" | "retried" | "record" |
// "fetch_inside_batch" | "group", ...}. Exits 1 with a message on stderr when anything is not as the contract says.
const { loadContract, BrokerClient, KanalError } = require('./src/kanal');
const { partitionForKey } = require('./src/murmur3');
const { CODEC, CODEC_NAMES, encodeBatch, parseLogEntries } = require('./src/batch');
const { protoDir } = require('./src/protodir');
const { Coordinator } = require('./src/coordinator');
const { Writer, varint } = require('./src/wire');

const FETCH_BYTES_MAX = 1 << 20;

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  if (i >= 0 && process.argv[i + 1] !== undefined) return process.argv[i + 1];
  if (fallback === undefined) throw new Error(`missing ${name}`);
  return fallback;
}

function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

function expect(condition, message) {
  if (!condition) throw new Error(`contract broken: ${message}`);
}

function ok(error, errorMessage, what) {
  if (error !== 'NONE') throw new KanalError(error, `${what}: ${errorMessage}`);
}

async function main() {
  const topic = arg('--topic');
  const recordCount = Number(arg('--records', '12'));
  const group = arg('--group', '');
  const contract = loadContract(protoDir());
  const security = securityFromArgs();
  const bootstrap = new BrokerClient(contract, arg('--bootstrap').split(',')[0], security);
  const clients = new Map(); // endpoint -> BrokerClient
  const clientFor = (endpoint) => {
    if (!clients.has(endpoint)) clients.set(endpoint, new BrokerClient(contract, endpoint, security));
    return clients.get(endpoint);
  };
  const highWatermarks = new Map(); // partition -> BigInt
  try {
    // ---- 1. metadata ----
    const md = await bootstrap.call('Metadata', { topics: [topic] });
    const t = md.topics.find((x) => x.name === topic);
    expect(t, `Metadata did not answer for ${topic}`);
    ok(t.error, '', `Metadata of ${topic}`);
    const endpoints = new Map(md.brokers.map((b) => [b.broker_id, b.endpoint]));
    const partitions = t.partitions.map((p) => {
      ok(p.error, '', `partition ${p.partition}`);
      expect(endpoints.has(p.leader), `partition ${p.partition} has no live leader`);
      return { partition: p.partition, leader: endpoints.get(p.leader), leaderEpoch: p.leader_epoch };
    });
    partitions.sort((a, b) => a.partition - b.partition);
    emit({ event: 'metadata', topic, partitions: partitions.length, cluster_id: md.cluster_id,
      brokers: md.brokers.map((b) => ({ broker_id: b.broker_id, endpoint: b.endpoint })) });

    // ---- 2. produce ----
    const ids = await bootstrap.call('InitProducerId', {});
    ok(ids.error, ids.error_message, 'InitProducerId');
    const producerId = BigInt(ids.producer_id);
    const sequences = new Map(); // partition -> next sequence; each partition starts at 0
    const now = BigInt(Date.now());
    const records = [];
    for (let i = 0; i < recordCount; i++) {
      const key = `key-${i}`;
      records.push({
        index: i, round: i < recordCount / 2 ? 0 : 1, key: Buffer.from(key), value: Buffer.from(`value-${i}`),
        timestampMs: now + BigInt(i), headers: [{ key: 'index', value: Buffer.from(String(i)) }],
        partition: partitionForKey(Buffer.from(key), partitions.length),
      });
    }
    const requests = []; // per round: [{leader, request, batches: [{partition, records}]}]
    for (const [round, codec] of [[0, CODEC.NONE], [1, CODEC.GZIP]]) {
      const byLeader = new Map();
      for (const p of partitions) {
        const recs = records.filter((r) => r.round === round && r.partition === p.partition);
        if (recs.length === 0) continue;
        const baseSequence = sequences.get(p.partition) || 0;
        sequences.set(p.partition, baseSequence + recs.length);
        const bytes = encodeBatch(recs, { codec, producerId, producerEpoch: ids.producer_epoch, baseSequence });
        if (!byLeader.has(p.leader)) byLeader.set(p.leader, []);
        byLeader.get(p.leader).push({ partition: p.partition, records: recs, bytes });
      }
      for (const [leader, batches] of byLeader) {
        // timeout_ms: how long the leader may wait for the ISR (acks=all).
        const request = { acks: -1, timeout_ms: 10000,
          topics: [{ topic, partitions: batches.map((b) => ({ partition: b.partition, batches: [b.bytes] })) }] };
        const reply = await clientFor(leader).call('Produce', request);
        for (const result of reply.topics[0].partitions) {
          ok(result.error, result.error_message, `Produce to ${topic}-${result.partition}`);
          const batch = batches.find((b) => b.partition === result.partition);
          batch.baseOffset = BigInt(result.base_offset);
          batch.records.forEach((r, i) => {
            emit({ event: 'produced', partition: r.partition, offset: Number(batch.baseOffset) + i,
              key: r.key.toString(), value: r.value.toString(), codec: CODEC_NAMES[codec] });
          });
        }
        requests.push({ round, leader, request, batches });
      }
    }

    // ---- 3. a retried request: NONE with the original offsets, nothing stored ----
    for (const { leader, request, batches } of requests.filter((r) => r.round === 0)) {
      const reply = await clientFor(leader).call('Produce', request);
      for (const result of reply.topics[0].partitions) {
        const original = batches.find((b) => b.partition === result.partition).baseOffset;
        expect(result.error === 'NONE', `a retried batch answered ${result.error}, not NONE`);
        expect(BigInt(result.base_offset) === original,
          `a retried batch answered offset ${result.base_offset}, not the original ${original}`);
        emit({ event: 'retried', partition: result.partition, error: result.error,
          base_offset: Number(result.base_offset) });
      }
    }

    // ---- 4. fetch everything back ----
    for (const p of partitions) {
      const broker = clientFor(p.leader);
      const listed = await broker.call('ListOffsets', {
        topics: [{ topic, partitions: [{ partition: p.partition, timestamp_ms: -2 }] }] });
      const start = listed.topics[0].partitions[0];
      ok(start.error, '', `ListOffsets of ${topic}-${p.partition}`);
      let offset = BigInt(start.offset);
      for (;;) {
        const { data, batches } = await fetchBatches(broker, topic, p, offset);
        for (const batch of batches) {
          for (const r of batch.records) {
            if (r.offset < offset) continue; // a batch starts at its base offset, maybe below ours
            emit({ event: 'record', partition: p.partition, offset: Number(r.offset),
              key: r.key === null ? null : r.key.toString(), value: r.value === null ? null : r.value.toString(),
              timestamp_ms: Number(r.timestampMs),
              headers: r.headers.map((h) => [h.key, h.value === null ? null : h.value.toString()]),
              codec: CODEC_NAMES[batch.codec], producer_id: batch.producerId.toString(),
              base_sequence: batch.baseSequence });
          }
          offset = batch.baseOffset + BigInt(batch.lastOffsetDelta) + 1n;
        }
        if (offset >= BigInt(data.high_watermark)) {
          highWatermarks.set(p.partition, BigInt(data.high_watermark));
          break;
        }
      }
    }

    // A fetch offset inside a stored batch returns the whole batch from its base offset.
    const multi = requests.flatMap((r) => r.batches).find((b) => b.records.length >= 2);
    if (multi) {
      const p = partitions.find((x) => x.partition === multi.partition);
      const inside = multi.baseOffset + 1n;
      const { batches } = await fetchBatches(clientFor(p.leader), topic, p, inside);
      expect(batches.length > 0, `a fetch at ${inside} returned nothing`);
      expect(batches[0].baseOffset === multi.baseOffset,
        `a fetch at ${inside} started with a batch at ${batches[0].baseOffset}, not ${multi.baseOffset}`);
      const first = batches[0].records.find((r) => r.offset >= inside);
      emit({ event: 'fetch_inside_batch', partition: p.partition, fetch_offset: Number(inside),
        first_batch_base_offset: Number(batches[0].baseOffset), first_record_offset: Number(first.offset) });
    }

    // ---- 5. a consumer group: join, sync, commit, read the commits back, leave ----
    if (group) await groupRound(bootstrap, clientFor, group, topic, partitions, highWatermarks);
  } finally {
    bootstrap.close();
    for (const c of clients.values()) c.close();
  }
}

function securityFromArgs() {
  const caFile = arg('--tls-ca-file', '');
  const user = arg('--user', '');
  if (!caFile) {
    if (user) throw new Error('--user needs --tls-ca-file: a password is sent over TLS only');
    return null;
  }
  const security = { caFile, certFile: arg('--tls-cert-file', '') || undefined,
    keyFile: arg('--tls-key-file', '') || undefined };
  if (user) {
    if (process.env.KANAL_PASSWORD === undefined) throw new Error('--user needs the password in $KANAL_PASSWORD');
    security.user = user;
    security.password = process.env.KANAL_PASSWORD;
  }
  return security;
}

// ConsumerSubscription / ConsumerAssignment (broker.proto) by hand: field 1 repeated (a topic name, or
// a TopicPartitions with its int32 partitions packed).
function subscription(topic) {
  return new Writer().bytes(1, Buffer.from(topic)).finish();
}

function assignment(topic, partitionIds) {
  const tp = new Writer().bytes(1, Buffer.from(topic)).bytes(2, Buffer.concat(partitionIds.map(varint))).finish();
  return new Writer().bytes(1, tp).finish();
}

async function groupRound(bootstrap, clientFor, group, topic, partitions, highWatermarks) {
  const coordinator = new Coordinator(bootstrap, clientFor, group);
  const joinRequest = (memberId) => ({ group_id: group, session_timeout_ms: 10000, rebalance_timeout_ms: 10000,
    member_id: memberId, protocol_type: 'consumer', client_id: 'kanal-node-example',
    protocols: [{ name: 'range', metadata: subscription(topic) }] });
  let join = await coordinator.call('JoinGroup', joinRequest(''));
  if (join.error === 'MEMBER_ID_REQUIRED') join = await coordinator.call('JoinGroup', joinRequest(join.member_id));
  ok(join.error, join.error_message, `JoinGroup ${group}`);
  expect(join.leader === join.member_id, 'the only member of a new group leads it');
  const member = { group_id: group, generation_id: join.generation_id, member_id: join.member_id };
  const ids = partitions.map((p) => p.partition);
  const sync = await coordinator.call('SyncGroup', { ...member, protocol_type: 'consumer',
    protocol_name: join.protocol_name, assignments: [{ member_id: join.member_id, assignment: assignment(topic, ids) }] });
  ok(sync.error, sync.error_message, `SyncGroup ${group}`);
  expect(Buffer.compare(sync.assignment, assignment(topic, ids)) === 0, 'SyncGroup returned another assignment');
  const commit = await coordinator.call('OffsetCommit', { ...member, topics: [{ topic, partitions: partitions.map(
    (p) => ({ partition: p.partition, offset: highWatermarks.get(p.partition).toString(), leader_epoch: p.leaderEpoch })) }] });
  ok(commit.error, commit.error_message, `OffsetCommit ${group}`);
  for (const result of commit.topics[0].partitions) ok(result.error, '', `OffsetCommit of partition ${result.partition}`);
  const fetched = await coordinator.call('OffsetFetch', { group_id: group, topics: [{ topic, partitions: ids }],
    require_stable: true });
  ok(fetched.error, fetched.error_message, `OffsetFetch ${group}`);
  const committed = {};
  for (const o of fetched.offsets) {
    ok(o.error, '', `OffsetFetch of partition ${o.partition}`);
    expect(BigInt(o.offset) === highWatermarks.get(o.partition), `partition ${o.partition}: committed ${o.offset}`);
    committed[o.partition] = Number(o.offset);
  }
  const left = await coordinator.call('LeaveGroup', { group_id: group, members: [{ member_id: join.member_id }] });
  ok(left.error, left.error_message, `LeaveGroup ${group}`);
  emit({ event: 'group', group, coordinator: coordinator.nodeId, generation_id: join.generation_id, committed,
    retries: coordinator.retries });
}

async function fetchBatches(broker, topic, p, offset) {
  // replica_id is left unset: this is a consumer's fetch. current_leader_epoch is the one Metadata gave
  // (-1 would skip the check; 0, the field left out, is checked as epoch 0).
  const reply = await broker.call('Fetch', {
    max_wait_ms: 0, min_bytes: 1, max_bytes: FETCH_BYTES_MAX,
    topics: [{ topic, partitions: [{ partition: p.partition, fetch_offset: offset.toString(),
      max_bytes: FETCH_BYTES_MAX, current_leader_epoch: p.leaderEpoch }] }],
  });
  const data = reply.topics[0].partitions[0];
  ok(data.error, data.error_message, `Fetch of ${topic}-${p.partition} at ${offset}`);
  return { data, batches: parseLogEntries(data.records) };
}

main().catch((err) => {
  process.stderr.write(`kanal node client: ${err.stack || err}\n`);
  process.exit(1);
});
