//! The recent-history sink behind the status page: the last events, and
//! per-second counts for the last ten minutes (served per provider,
//! fallbacks, refusals, failures). Bounded: a fixed ring of seconds and a
//! fixed number of events.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::event::GenerationEvent;

/// Seconds of history kept.
pub const WINDOW_SECONDS: u64 = 600;

/// Events kept for the "last events" list.
pub const LAST_EVENTS: usize = 50;

/// One second of traffic.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Second {
    /// Unix seconds.
    pub t: u64,
    pub served: BTreeMap<String, u32>,
    pub fell_back: u32,
    pub refused: u32,
    pub failed: u32,
    pub total: u32,
}

/// What the status page reads.
#[derive(Debug, Default)]
pub struct Recent {
    inner: Mutex<RecentInner>,
}

#[derive(Debug, Default)]
struct RecentInner {
    seconds: VecDeque<Second>,
    events: VecDeque<Arc<GenerationEvent>>,
}

impl Recent {
    fn record(&self, e: Arc<GenerationEvent>) {
        let now = crate::event::unix_ms() / 1000;
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if inner.seconds.back().is_none_or(|s| s.t != now) {
            inner.seconds.push_back(Second {
                t: now,
                ..Second::default()
            });
        }
        while inner
            .seconds
            .front()
            .is_some_and(|s| s.t + WINDOW_SECONDS <= now)
        {
            inner.seconds.pop_front();
        }
        if let Some(s) = inner.seconds.back_mut() {
            s.total += 1;
            if e.success {
                // The provider's count, its name copied only the first time.
                let name = e.provider.as_deref().unwrap_or_default();
                match s.served.get_mut(name) {
                    Some(n) => *n += 1,
                    None => {
                        s.served.insert(name.to_owned(), 1);
                    }
                }
            } else {
                s.failed += 1;
            }
            s.fell_back += u32::from(e.fell_back);
            s.refused += u32::from(e.content_filtered);
        }
        inner.events.push_back(e);
        while inner.events.len() > LAST_EVENTS {
            inner.events.pop_front();
        }
    }

    /// The seconds with traffic in the window, oldest first.
    pub fn seconds(&self) -> Vec<Second> {
        let now = crate::event::unix_ms() / 1000;
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner
            .seconds
            .iter()
            .filter(|s| s.t + WINDOW_SECONDS > now)
            .cloned()
            .collect()
    }

    /// The last events, newest first.
    pub fn events(&self) -> Vec<GenerationEvent> {
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.events.iter().rev().map(|e| (**e).clone()).collect()
    }
}

impl crate::sink::fanout::Inline for Recent {
    fn record(&self, event: &Arc<GenerationEvent>) {
        Recent::record(self, Arc::clone(event));
    }
}
