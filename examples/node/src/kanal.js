'use strict';
// The Broker service from kanal's .proto files, with promise-returning calls and kanal's error rules
// (errors.proto): a whole-call failure is a gRPC status whose trailing metadata carries
// `kanal-error-code` (the ErrorCode number) and `kanal-error-message`; per-item errors are ErrorCode
// fields in the reply (names here, as the loader is set to give enums as strings).
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// Fetch replies may be as large as the request's max_bytes; gRPC's default receive limit is 4 MiB.
const RECEIVE_BYTES_MAX = 64 << 20;

function loadContract(protoDir) {
  const definition = protoLoader.loadSync([path.join('kanal', 'v1', 'broker.proto')], {
    includeDirs: [protoDir],
    keepCase: true, // field names as in the .proto files
    longs: String, // int64 as decimal strings: no precision lost
    enums: String, // ErrorCode and CompressionCodec as their names
    defaults: true, // fields left out read as their zero value, as proto3 defines
    oneofs: true,
  });
  const errorNames = new Map(
    definition['kanal.v1.ErrorCode'].type.value.map((v) => [v.number, v.name]),
  );
  return { kanal: grpc.loadPackageDefinition(definition).kanal.v1, errorNames };
}

class KanalError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

// How a client proves who it is (broker.proto, "Authentication"): TLS with the cluster's CA, optionally
// a client certificate, and a user name and password in the binary metadata keys `kanal-user-bin` and
// `kanal-password-bin` on every call: the raw UTF-8 bytes (grpc-js base64-encodes `-bin` values itself),
// the bare user name (`alice`, not `User:alice`), both keys or neither, over TLS only.
// security: { caFile, certFile, keyFile, user, password }, every field optional; null: plaintext.
function channelCredentials(security) {
  if (!security || !security.caFile) {
    if (security && (security.user || security.password)) {
      throw new Error('a password is sent over TLS only: give the CA file (--tls-ca-file) too');
    }
    return grpc.credentials.createInsecure();
  }
  if ((security.user === undefined) !== (security.password === undefined)) {
    throw new Error('give both a user name and a password, or neither');
  }
  const read = (file) => (file ? fs.readFileSync(file) : null);
  return grpc.credentials.createSsl(read(security.caFile), read(security.keyFile), read(security.certFile));
}

function callMetadata(security) {
  const metadata = new grpc.Metadata();
  if (security && security.user !== undefined) {
    metadata.set('kanal-user-bin', Buffer.from(security.user, 'utf8'));
    metadata.set('kanal-password-bin', Buffer.from(security.password, 'utf8'));
  }
  return metadata;
}

class BrokerClient {
  constructor(contract, endpoint, security = null) {
    this.errorNames = contract.errorNames;
    this.endpoint = endpoint;
    this.metadata = callMetadata(security);
    this.stub = new contract.kanal.Broker(endpoint, channelCredentials(security), {
      'grpc.max_receive_message_length': RECEIVE_BYTES_MAX,
    });
  }

  call(method, request, timeoutMs = 15000) {
    return new Promise((resolve, reject) => {
      this.stub[method](request, this.metadata, { deadline: Date.now() + timeoutMs }, (err, reply) => {
        if (!err) return resolve(reply);
        const code = err.metadata && err.metadata.get('kanal-error-code')[0];
        if (code !== undefined) {
          const message = err.metadata.get('kanal-error-message')[0] || err.details;
          return reject(new KanalError(this.errorNames.get(Number(code)) || `ErrorCode ${code}`, message));
        }
        return reject(new Error(`${method} to ${this.endpoint}: ${err.message}`));
      });
    });
  }

  close() {
    this.stub.close();
  }
}

module.exports = { loadContract, BrokerClient, KanalError };
