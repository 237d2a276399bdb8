// Every mocha run of this project (npm test's tiers, a single file by hand): the root hooks that
// remove each test file's temp directories once it has run (test/helpers/root-hooks.ts).
module.exports = { require: ['dist/test/helpers/root-hooks.js'] };
