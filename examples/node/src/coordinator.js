'use strict';
// Calls to a group's coordinator, following broker.proto's "Finding a coordinator":
// - FindCoordinator (at the bootstrap broker) names the coordinator; COORDINATOR_NOT_AVAILABLE: ask again.
// - At the coordinator, COORDINATOR_LOAD_IN_PROGRESS: the same call to the same broker again, after a backoff.
// - NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: the coordinator moved; find it again, then call there.
// The three are retriable and change nothing. Each retry is kept in `retries`, so a run shows what it met.
// Other answers (NONE, MEMBER_ID_REQUIRED, ...) are the caller's to handle.
const { KanalError } = require('./kanal');

const RETRY_BACKOFF_MS = 50;
const RETRY_MS_MAX = 30000; // give up on one call after this long

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

class Coordinator {
  // bootstrap: a BrokerClient; clientFor(endpoint): a BrokerClient for a broker; key: the group id.
  constructor(bootstrap, clientFor, key) {
    this.bootstrap = bootstrap;
    this.clientFor = clientFor;
    this.key = key;
    this.client = null;
    this.nodeId = -1;
    this.retries = []; // {method, error, broker}
  }

  async find(deadline) {
    for (;;) {
      const found = await this.bootstrap.call('FindCoordinator', { key: this.key });
      if (found.error === 'NONE') {
        this.client = this.clientFor(found.endpoint);
        this.nodeId = found.node_id;
        return;
      }
      if (found.error !== 'COORDINATOR_NOT_AVAILABLE') {
        throw new KanalError(found.error, `FindCoordinator for ${this.key}: ${found.error_message}`);
      }
      await this.backoff('FindCoordinator', found.error, -1, deadline);
    }
  }

  // The call's reply once the coordinator answered it with anything but the three coordinator errors.
  async call(method, request) {
    const deadline = Date.now() + RETRY_MS_MAX;
    for (;;) {
      if (this.client === null) await this.find(deadline);
      let reply = null;
      let error;
      try {
        reply = await this.client.call(method, request);
        error = reply.error;
      } catch (err) {
        if (!(err instanceof KanalError)) throw err;
        error = err.code; // a whole-call failure (errors.proto's trailer)
        if (!['NOT_COORDINATOR', 'COORDINATOR_NOT_AVAILABLE', 'COORDINATOR_LOAD_IN_PROGRESS'].includes(error)) {
          throw err;
        }
      }
      if (error === 'NOT_COORDINATOR' || error === 'COORDINATOR_NOT_AVAILABLE') {
        const broker = this.nodeId;
        this.client = null; // find it again
        await this.backoff(method, error, broker, deadline);
      } else if (error === 'COORDINATOR_LOAD_IN_PROGRESS') {
        await this.backoff(method, error, this.nodeId, deadline);
      } else {
        return reply;
      }
    }
  }

  async backoff(method, error, broker, deadline) {
    this.retries.push({ method, error, broker });
    if (Date.now() > deadline) throw new KanalError(error, `${method} for ${this.key}: still ${error}`);
    await sleep(RETRY_BACKOFF_MS);
  }
}

module.exports = { Coordinator };
