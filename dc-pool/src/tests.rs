//! What a refused post says, apart from any device. The pool's runs are on the software ConnectX
//! (tests/device_*.rs).
use super::types::{DcPoolWouldBlock, PostToDestinationError, PostToDestinationErrorKind};

#[test]
fn a_refused_post_says_why_once() {
    use sideway_ext::ibverbs::address_handle::{CreateAddressHandleError, CreateAddressHandleErrorKind};
    use sideway_ext::mlx5::dc::endpoint::{CreateDcAddressHandleError, CreateDcAddressHandleErrorKind};
    use std::error::Error as _;

    let link_layer = CreateDcAddressHandleErrorKind::LinkLayerMismatch {
        port: 1,
        local_is_roce: true,
        remote_is_roce: false,
    };
    let kinds = [
        (
            PostToDestinationErrorKind::from(DcPoolWouldBlock::NoInitiator),
            "no DC initiator is free",
        ),
        (DcPoolWouldBlock::QuotaExhausted.into(), "used its quota"),
        (DcPoolWouldBlock::QueueFull.into(), "send queue is full"),
        (DcPoolWouldBlock::BatchFull.into(), "the batch is full"),
        (
            DcPoolWouldBlock::Recovering {
                initiator: 3,
                stream: Some(1),
            }
            .into(),
            "DC initiator 3 (stream Some(1)) is being recovered",
        ),
        (PostToDestinationErrorKind::Unreachable, "reported unreachable"),
        (PostToDestinationErrorKind::NoInitiatorInService, "out of service"),
        (PostToDestinationErrorKind::UnknownDestination, "no such destination"),
        (PostToDestinationErrorKind::Retiring, "retired"),
        (
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: true },
            "posts with start_post_send_on_stream",
        ),
        (
            PostToDestinationErrorKind::StreamsMismatch { streams_pool: false },
            "posts with start_post_send",
        ),
        (CreateDcAddressHandleError::from(link_layer).into(), "address handle"),
    ];
    // What a report that prints the chain of sources shows.
    let chain = |error: &PostToDestinationError| {
        let mut chain = vec![error.to_string()];
        let mut source = error.source();
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        chain
    };
    for (kind, reason) in kinds {
        let error = PostToDestinationError::from(kind);
        let text = error.to_string();
        assert!(text.contains(reason), "{text:?} does not say {reason:?}");
        // The reason once.
        let chain = chain(&error);
        assert_eq!(
            chain.iter().filter(|message| message.contains(reason)).count(),
            1,
            "{chain:?}"
        );
    }
    // A peer whose MAC address the kernel could not resolve: an address handle error, whose
    // chain says why once, then the library's errno.
    let unresolved = CreateAddressHandleErrorKind::PeerMacUnresolved {
        port: 1,
        source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
    };
    let error = PostToDestinationError::from(PostToDestinationErrorKind::from(CreateDcAddressHandleError::from(
        CreateDcAddressHandleErrorKind::from(CreateAddressHandleError::from(unresolved)),
    )));
    let chain = chain(&error);
    assert!(chain[0].contains("address handle"), "{chain:?}");
    assert_eq!(
        chain
            .iter()
            .filter(|message| message.contains("peer's MAC address"))
            .count(),
        1,
        "{chain:?}"
    );
    let errno = std::io::Error::from_raw_os_error(libc::ETIMEDOUT).to_string();
    assert_eq!(chain.last(), Some(&errno), "{chain:?}");
}
