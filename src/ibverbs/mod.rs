//! Extensions to sideway's [`ibverbs`](sideway::ibverbs) module: the parts of libibverbs that
//! sideway 0.4.3 does not wrap yet.
