//! envgen patch C7, tests: a `Protocol` whose every connection is to a peer
//! that is gone (sends, receives and closes fail, as after a reset by a
//! killed process), and the data service and the orchestrator client on it.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use burn_communication::data_service::{TensorDataServer, TensorDataService};
use burn_communication::{
    Address, CommunicationChannel, CommunicationError, Message, Protocol, ProtocolClient,
    ProtocolServer,
};
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
pub(crate) struct Gone;
impl CommunicationError for Gone {}

/// A connection whose other end was killed.
pub(crate) struct BrokenChannel;

impl CommunicationChannel for BrokenChannel {
    type Error = Gone;
    async fn send(&mut self, _: Message) -> Result<(), Gone> {
        Err(Gone)
    }
    async fn recv(&mut self) -> Result<Option<Message>, Gone> {
        Err(Gone)
    }
    async fn close(&mut self) -> Result<(), Gone> {
        Err(Gone)
    }
}

pub(crate) struct BrokenClient;

impl ProtocolClient for BrokenClient {
    type Channel = BrokenChannel;
    type Error = Gone;
    fn connect(_: Address, _: &str) -> Pin<Box<dyn Future<Output = Option<BrokenChannel>> + Send>> {
        Box::pin(async { Some(BrokenChannel) })
    }
}

type Handler = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server that hands each route one broken connection, to be run by the test.
#[derive(Default)]
pub(crate) struct BrokenServer {
    handlers: std::sync::Mutex<Vec<Handler>>,
}

impl ProtocolServer for BrokenServer {
    type Channel = BrokenChannel;
    type Error = Gone;
    fn route<C, Fut>(self, _: &str, callback: C) -> Self
    where
        C: FnOnce(Self::Channel) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.handlers
            .lock()
            .unwrap()
            .push(Box::pin(callback(BrokenChannel)));
        self
    }
    async fn serve<F>(self, _: F) -> Result<(), Gone>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Ok(())
    }
}

#[derive(Clone)]
pub(crate) struct Broken;
impl Protocol for Broken {
    type Client = BrokenClient;
    type Server = BrokenServer;
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Serving a peer that is gone, downloading from it and closing its
/// stream each panicked inside the runtime's worker before C7; now the
/// handler returns and the download is `None` (the caller's `PeerLost`).
#[test]
fn a_lost_peer_is_no_panic_in_the_data_service() {
    runtime().block_on(async {
        let service = Arc::new(TensorDataService::<burn_flex::Flex, Broken>::new(
            CancellationToken::new(),
        ));
        let server = BrokenServer::default().route_tensor_data_service(service.clone());
        let handlers = std::mem::take(&mut *server.handlers.lock().unwrap());
        assert_eq!(handlers.len(), 1);
        for handler in handlers {
            handler.await;
        }
        let gone = Address::from_str("ws://127.0.0.1:9").unwrap();
        assert!(service.download_tensor(gone, 0.into()).await.is_none());
        service.close().await;
    });
}

/// The orchestrator's end reset: the client's response loop ends, and
/// closing the stream that is already gone is no panic.
#[test]
fn a_lost_orchestrator_ends_the_response_loop_without_a_panic() {
    runtime().block_on(
        super::worker::GlobalClientWorker::<BrokenClient>::response_loop_for_test(BrokenChannel),
    );
}

/// A peer killed while it synced (a barrier): its connection resets, and
/// the sync handler returns instead of panicking (C7, found by a full test
/// run after the first C7 patch).
#[test]
fn a_lost_peer_is_no_panic_in_the_sync_handler() {
    runtime().block_on(async {
        let service =
            super::sync::SyncService::<Broken>::new(Arc::new(tokio::sync::RwLock::new(None)));
        service.handle_sync_connection(BrokenChannel).await;
    });
}
