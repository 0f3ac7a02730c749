//! Extensions to sideway's [`ibverbs`](sideway::ibverbs) module: the parts of libibverbs that
//! sideway 0.4.3 does not wrap yet.
//!
//! - [`shared_receive_queue`]: shared receive queues (SRQ), their limit, and posting receives;
//! - [`queue_pair`]: RC and UD queue pairs that receive through an SRQ, on a queue-pair core
//!   with a transition table per type, and [`post_send_guard`], the `ibv_wr_*` posting API;
//! - [`address_handle`]: address handles for datagram transports;
//! - [`async_event`]: the device context's asynchronous events (SRQ limit, QP last WQE, …);
//! - [`work_completion`]: completions with every field, including the queue pair number;
//! - [`completion_channel`]: completion events, to sleep (or wait on a file descriptor) until a
//!   completion queue gets a completion instead of busy polling it;
//! - [`extension`]: the factories on sideway's types (`pd.create_srq_builder()`, `pd.create_ah()`,
//!   `ctx.async_event_reader()`, `cq.poll_work_completions()`) and the completion-event methods
//!   (`cq.req_notify_cq()`, `channel.get_cq_event()`).
//!
//! # Example
//!
//! ```no_run
//! use sideway::ibverbs::device::DeviceList;
//! use sideway_ext::ibverbs::extension::ProtectionDomainExt;
//! use sideway_ext::ibverbs::shared_receive_queue::SharedReceiveQueueModification;
//!
//! let devices = DeviceList::new().unwrap();
//! let ctx = devices.get(0).unwrap().open().unwrap();
//! let pd = ctx.alloc_pd().unwrap();
//! let cq = ctx.create_cq_builder().setup_cqe(256).build().unwrap();
//!
//! let srq = pd.create_srq_builder().setup_max_wr(128).setup_max_sge(1).build().unwrap();
//! srq.modify(SharedReceiveQueueModification::ArmLimit(16)).unwrap();
//! let qp = srq.create_qp_builder().setup_send_cq(cq.clone()).setup_recv_cq(cq).build_rc().unwrap();
//! assert_eq!(srq.query().unwrap().srq_limit, 16);
//! # drop(qp);
//! ```
pub mod address_handle;
pub mod async_event;
pub mod completion_channel;
pub mod extension;
pub mod post_send_guard;
pub mod queue_pair;
pub mod shared_receive_queue;
pub mod work_completion;

/// Reads the device attributes through a protection domain's context (`ibv_query_device`).
pub(crate) fn query_device_attr(
    pd: &sideway::ibverbs::protection_domain::ProtectionDomain,
) -> std::io::Result<rdma_mummy_sys::ibv_device_attr> {
    let mut attr = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_device_attr>::zeroed();
    // SAFETY: the PD (and so its context) is alive; attr is a writable ibv_device_attr.
    let ret = unsafe { rdma_mummy_sys::ibv_query_device(pd.pd().as_ref().context, attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret));
    }
    // SAFETY: ibv_query_device filled it (and it was zeroed before).
    Ok(unsafe { attr.assume_init() })
}
