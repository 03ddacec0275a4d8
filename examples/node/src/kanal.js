'use strict';
// The Broker service from kanal's .proto files, with promise-returning calls and kanal's error rules
// (errors.proto): a whole-call failure is a gRPC status whose trailing metadata carries
// `kanal-error-code` (the ErrorCode number) and `kanal-error-message`; per-item errors are ErrorCode
// fields in the reply (names here, as the loader is set to give enums as strings).
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

class BrokerClient {
  constructor(contract, endpoint) {
    this.errorNames = contract.errorNames;
    this.endpoint = endpoint;
    this.stub = new contract.kanal.Broker(endpoint, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': RECEIVE_BYTES_MAX,
    });
  }

  call(method, request, timeoutMs = 15000) {
    return new Promise((resolve, reject) => {
      this.stub[method](request, { deadline: Date.now() + timeoutMs }, (err, reply) => {
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
