'use strict';
// Where the contract lives: --proto-dir DIR, or $KANAL_PROTO_DIR, or the repository's proto/ folder (this
// example sits in examples/node/ of the kanal repository). DIR holds kanal/v1/*.proto and the vector files.
const path = require('path');

function protoDir(argv = process.argv) {
  const i = argv.indexOf('--proto-dir');
  if (i >= 0 && argv[i + 1]) return path.resolve(argv[i + 1]);
  if (process.env.KANAL_PROTO_DIR) return path.resolve(process.env.KANAL_PROTO_DIR);
  return path.resolve(__dirname, '..', '..', '..', 'proto');
}

module.exports = { protoDir };
