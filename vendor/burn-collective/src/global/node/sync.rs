use std::{
    marker::PhantomData,
    sync::{Arc, Mutex},
    vec,
};

use burn_communication::{CommunicationChannel, Message, Protocol, ProtocolClient};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, RwLock};

use crate::{NodeId, global::shared::GlobalCollectiveError, node::base::NodeState};

/// Handles the status of sync requests from other nodes
pub(crate) struct SyncService<P: Protocol> {
    /// Current node's state, shared with the thread that does aggregations
    node_state: Arc<RwLock<Option<NodeState>>>,
    /// The number of peers that have requested to sync with us since the last successful sync.
    syncing_peers: Mutex<Vec<NodeId>>,
    /// Notification on each incoming sync request
    sync_notif: Notify,

    _p: PhantomData<P>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SyncRequest(NodeId);

impl<P: Protocol> SyncService<P> {
    pub fn new(node_state: Arc<RwLock<Option<NodeState>>>) -> Self {
        Self {
            node_state,
            syncing_peers: Mutex::new(vec![]),
            sync_notif: Notify::new(),
            _p: PhantomData,
        }
    }

    fn add_syncing_peer(&self, peer: NodeId) {
        let mut syncing_peers = self.syncing_peers.lock().unwrap();
        syncing_peers.push(peer);
    }

    /// Sync with all peers. envgen C7: a peer that cannot be reached (it
    /// died) is `PeerLost`, not a panic of the caller's task.
    pub async fn sync(&self) -> Result<(), GlobalCollectiveError> {
        // we can't sync while we register
        let node_state = self.node_state.read().await;
        let node_state = node_state
            .as_ref()
            .expect("Trying to sync a node before having registered to the orchestrator");

        // this peer is syncing
        self.add_syncing_peer(node_state.node_id);
        for (id, addr) in &node_state.nodes {
            if *id == node_state.node_id {
                continue;
            }

            let Some(mut connection) = P::Client::connect(addr.clone(), "sync").await else {
                return Err(GlobalCollectiveError::PeerLost(*id));
            };
            let msg = SyncRequest(node_state.node_id);
            let sync_bytes = rmp_serde::to_vec(&msg).unwrap();
            if connection
                .send(Message::new(sync_bytes.into()))
                .await
                .is_err()
            {
                return Err(GlobalCollectiveError::PeerLost(*id));
            }
        }
        loop {
            // envgen patch C2: register for the notification *before*
            // checking, so a sync arriving between the check and the await
            // is not lost (tokio's Notify::notify_waiters wakes only
            // futures that already exist).
            let notified = self.sync_notif.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                // compare currently synced peers with list of all nodes
                // envgen patch C1: consume one sync per node from the shared
                // list itself. Upstream cleared a copy (`.to_vec()`), so the
                // list never emptied and the second barrier passed at once
                // or hung. A fast peer may already have sent its sync for
                // the next barrier: that one stays.
                let mut guard = self.syncing_peers.lock().unwrap();
                let all_node_ids = node_state.nodes.keys().cloned().collect::<Vec<_>>();

                if all_node_ids.iter().all(|id| guard.contains(id)) {
                    // all nodes have synced
                    for id in &all_node_ids {
                        let pos = guard.iter().position(|p| p == id).unwrap();
                        guard.remove(pos);
                    }
                    return Ok(());
                }
            }
            // Wait for the next sync to come in
            notified.await
        }
    }

    pub async fn handle_sync_connection<C: CommunicationChannel>(&self, mut channel: C) {
        // envgen C7: a peer killed while it synced resets the connection;
        // that ends this connection, not the task (the barrier's caller
        // times out, C3). Same for a message that is not a sync request.
        let msg = match channel.recv().await {
            Ok(Some(msg)) => msg,
            Ok(None) => return,
            Err(err) => {
                log::warn!("sync connection from a peer failed: {err:?}");
                return;
            }
        };
        let msg = match rmp_serde::from_slice::<SyncRequest>(&msg.data) {
            Ok(msg) => msg,
            Err(err) => {
                log::warn!("a peer sent a sync message that is not one: {err}");
                return;
            }
        };

        self.add_syncing_peer(msg.0);

        self.sync_notif.notify_waiters();
    }
}
