//! Choosing node ports so that concurrent creators (many Lambdas) rarely collide.
//!
//! Each process keeps a view of the ports in use (refreshed from a service list when stale)
//! and draws uniformly at random among the ports it believes free. Two creators then only
//! collide when they draw the same free port at the same moment, which stays rare even at
//! 90% occupancy; the apiserver's allocator catches the rest and we draw again.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::seq::IndexedRandom;

/// Older views are refreshed before the next pick.
const VIEW_MAX_AGE: Duration = Duration::from_secs(30);

pub(crate) struct NodePortPicker {
    min: u16,
    max: u16,
    view: Mutex<View>,
}

struct View {
    used: HashSet<u16>,
    refreshed_at: Option<Instant>,
}

impl NodePortPicker {
    pub(crate) fn new(min: u16, max: u16) -> Self {
        Self {
            min,
            max,
            view: Mutex::new(View {
                used: HashSet::new(),
                refreshed_at: None,
            }),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        // A panic while holding this lock cannot leave the set inconsistent.
        self.view.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.view().refreshed_at.is_none_or(|at| at.elapsed() > VIEW_MAX_AGE)
    }

    pub(crate) fn replace_used(&self, used: impl IntoIterator<Item = u16>) {
        let mut view = self.view();
        view.used = used.into_iter().collect();
        view.refreshed_at = Some(Instant::now());
    }

    pub(crate) fn mark_used(&self, ports: impl IntoIterator<Item = u16>) {
        self.view().used.extend(ports);
    }

    pub(crate) fn mark_free(&self, ports: impl IntoIterator<Item = u16>) {
        let mut view = self.view();
        for port in ports {
            view.used.remove(&port);
        }
    }

    /// `count` distinct ports believed free and not in `exclude`, or `None` if there are too few.
    pub(crate) fn pick(&self, count: usize, exclude: &HashSet<u16>) -> Option<Vec<u16>> {
        let view = self.view();
        let free: Vec<u16> = (self.min..=self.max)
            .filter(|p| !view.used.contains(p) && !exclude.contains(p))
            .collect();
        drop(view);
        if free.len() < count {
            return None;
        }
        Some(free.choose_multiple(&mut rand::rng(), count).copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_distinct_free_ports_in_range() {
        let picker = NodePortPicker::new(31001, 31010);
        picker.replace_used([31001, 31002, 31003]);
        let exclude = HashSet::from([31004]);
        for _ in 0..200 {
            let ports = picker.pick(3, &exclude).unwrap();
            let distinct: HashSet<u16> = ports.iter().copied().collect();
            assert_eq!(distinct.len(), 3);
            assert!(ports.iter().all(|p| (31005..=31010).contains(p)), "{ports:?}");
        }
    }

    #[test]
    fn exhausted_range_yields_none_and_freed_ports_return() {
        let picker = NodePortPicker::new(31001, 31003);
        picker.replace_used([31001, 31002, 31003]);
        assert_eq!(picker.pick(1, &HashSet::new()), None);
        picker.mark_free([31002]);
        assert_eq!(picker.pick(1, &HashSet::new()), Some(vec![31002]));
        assert_eq!(picker.pick(2, &HashSet::new()), None);
    }

    #[test]
    fn staleness_follows_refresh() {
        let picker = NodePortPicker::new(31001, 31003);
        assert!(picker.is_stale());
        picker.replace_used([]);
        assert!(!picker.is_stale());
    }

    #[test]
    fn concurrent_creators_rarely_collide_at_ninety_percent() {
        // 32 creators with the same (fresh) view of a 90%-full range draw at once.
        let picker = NodePortPicker::new(31001, 32767);
        let used: Vec<u16> = (31001..=32767).filter(|p| p % 10 != 0).collect();
        picker.replace_used(used);
        let mut collisions = 0;
        let trials = 200;
        for _ in 0..trials {
            let mut seen = HashSet::new();
            for _ in 0..32 {
                let port = picker.pick(1, &HashSet::new()).unwrap()[0];
                if !seen.insert(port) {
                    collisions += 1;
                }
            }
        }
        // ~176 free ports, 32 draws: about 2.7 expected collisions of 32 per round (8%).
        let rate = f64::from(collisions) / f64::from(trials * 32);
        assert!(rate < 0.15, "collision rate {rate}");
    }
}
