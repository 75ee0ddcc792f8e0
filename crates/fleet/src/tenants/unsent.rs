//! Spend the fleet has not heard of yet: what an instance counted while
//! Redis was away, or a settlement that did not reach it, kept per record
//! and sent by the next sync or admission of the record that reaches
//! Redis.

use std::collections::HashMap;
use std::sync::Arc;

use understudy_settings::ClientRecord;

use super::{Counts, Tenants, fleet};
use crate::shared::SharedState;

impl Tenants {
    /// Sends the fleet what this instance spent while Redis was away (or a
    /// settlement did not reach it), now that Redis answers again.
    pub(super) fn flush_unsent(self: &Arc<Self>, record: &Arc<ClientRecord>) {
        let unsent = self.unsent_lock().remove(&record.name);
        let (Some((window, nanos)), Some(shared)) = (unsent, self.shared.clone()) else {
            return;
        };
        let record = Arc::clone(record);
        let at = Counts {
            window,
            ..Counts::default()
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it with (shutting down): kept for the
            // fleet's next sync.
            self.keep_unsent(&record.name, window, nanos);
            return;
        };
        let tenants = Arc::clone(self);
        handle.spawn(async move {
            if !fleet::settle(&shared, &record, at, 0, nanos).await {
                tenants.keep_unsent(&record.name, window, nanos);
            }
        });
    }

    /// Sends the fleet every record's spend it has not heard of (settlements
    /// that failed while Redis was away, give-backs of reservations made
    /// there): each sync does, and the last one at shutdown, so that a
    /// reservation given back reaches Redis without waiting for another
    /// admission of its record. What Redis does not take is kept for the
    /// next.
    pub async fn send_unsent(&self, shared: &SharedState) {
        let all: Vec<(Arc<str>, (u64, i64))> = self.unsent_lock().drain().collect();
        let mut all = all.into_iter();
        while let Some((name, (window, nanos))) = all.next() {
            // A record revoked since has no budget left to count against.
            let Some(record) = self.named(&name) else {
                continue;
            };
            let at = Counts {
                window,
                ..Counts::default()
            };
            if !fleet::settle(shared, &record, at, 0, nanos).await {
                // Redis is away: the rest waits for the next sync rather
                // than each waiting out its own call.
                for (name, (window, nanos)) in std::iter::once((name, (window, nanos))).chain(all) {
                    self.keep_unsent(&name, window, nanos);
                }
                return;
            }
        }
    }

    /// The spend change of `record` this instance holds for the fleet, not
    /// yet taken by Redis (nano-USD; negative: reservations given back).
    pub fn unsent_nanos(&self, record: &ClientRecord) -> Option<i64> {
        self.unsent_lock()
            .get(&record.name)
            .map(|(_, nanos)| *nanos)
    }

    fn unsent_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, (u64, i64)>> {
        self.unsent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps spend the fleet has not heard of, for the next sync or
    /// admission that reaches Redis (a window already gone is dropped).
    pub(super) fn keep_unsent(&self, name: &Arc<str>, window: u64, nanos: i64) {
        let mut unsent = self.unsent_lock();
        let entry = unsent.entry(Arc::clone(name)).or_insert((window, 0));
        if entry.0 > window {
            // Put back after a newer window's spend was kept: its own
            // window is gone.
            return;
        }
        if entry.0 < window {
            *entry = (window, 0);
        }
        entry.1 = entry.1.saturating_add(nanos);
    }
}
