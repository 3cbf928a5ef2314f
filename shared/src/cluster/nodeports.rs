//! Choosing ports of the range so that concurrent creators (many Lambdas) rarely collide.
//!
//! A port has `slots`: 1 for a NodePort Service (it takes the port on every node), one per
//! schedulable stack node for a `hostPort` (it takes the port on its own node only). Each
//! process keeps a view of how many slots of each port are taken (refreshed from the cluster
//! when stale) and draws at random among the least-used ports it believes to have a slot
//! left. Spreading use evenly keeps every port placeable on some node until the range is
//! truly full, and random draws make two creators collide only when they draw the same port
//! at the same moment; the apiserver's allocator (NodePort) or the scheduler's NodePorts
//! filter (hostPort) catches the rest and we draw again.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;

/// Older views are refreshed before the next pick (and a view of the Services' node ports
/// before a read judges ports by it).
pub(crate) const PORT_VIEW_MAX_AGE: Duration = Duration::from_secs(30);

pub(crate) struct PortPicker {
    min: u16,
    max: u16,
    view: Mutex<View>,
}

struct View {
    /// Slots taken per port; a port held on every node counts as `u32::MAX`.
    used: HashMap<u16, u32>,
    /// Slots per port.
    slots: u32,
    refreshed_at: Option<Instant>,
}

/// What the cluster holds of the range.
#[derive(Debug, Default)]
pub(crate) struct PortUse {
    /// Ports held on every node (the node ports of any Service).
    pub(crate) everywhere: Vec<u16>,
    /// Ports held on one node each (host ports of pods), once per pod holding it.
    pub(crate) on_one_node: Vec<u16>,
}

impl PortPicker {
    pub(crate) fn new(min: u16, max: u16) -> Self {
        Self {
            min,
            max,
            view: Mutex::new(View {
                used: HashMap::new(),
                slots: 1,
                refreshed_at: None,
            }),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        // A panic while holding this lock cannot leave the counts inconsistent.
        self.view.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn refreshed_at(&self) -> Option<Instant> {
        self.view().refreshed_at
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.view()
            .refreshed_at
            .is_none_or(|at| at.elapsed() > PORT_VIEW_MAX_AGE)
    }

    /// Replaces the view with what the cluster holds, `slots` per port.
    pub(crate) fn replace(&self, held: &PortUse, slots: u32) {
        let mut view = self.view();
        view.used.clear();
        view.slots = slots;
        for &port in &held.on_one_node {
            let used = view.used.entry(port).or_default();
            *used = used.saturating_add(1);
        }
        for &port in &held.everywhere {
            view.used.insert(port, u32::MAX);
        }
        view.refreshed_at = Some(Instant::now());
    }

    pub(crate) fn mark_used(&self, ports: impl IntoIterator<Item = u16>) {
        let mut view = self.view();
        for port in ports {
            let used = view.used.entry(port).or_default();
            *used = used.saturating_add(1);
        }
    }

    /// Marks `ports` as having no slot left (the cluster said so), until the next refresh.
    pub(crate) fn mark_full(&self, ports: impl IntoIterator<Item = u16>) {
        let mut view = self.view();
        for port in ports {
            view.used.insert(port, u32::MAX);
        }
    }

    pub(crate) fn mark_free(&self, ports: impl IntoIterator<Item = u16>) {
        let mut view = self.view();
        for port in ports {
            if let Some(used) = view.used.get_mut(&port) {
                *used = used.saturating_sub(1);
            }
        }
    }

    /// `count` distinct ports believed to have a slot left and not in `exclude`, least used
    /// first, at random among equals; `None` if there are too few.
    pub(crate) fn pick(&self, count: usize, exclude: &HashSet<u16>) -> Option<Vec<u16>> {
        let view = self.view();
        let mut free: Vec<(u32, u16)> = (self.min..=self.max)
            .filter(|p| !exclude.contains(p))
            .map(|p| (view.used.get(&p).copied().unwrap_or(0), p))
            .filter(|&(used, _)| used < view.slots)
            .collect();
        drop(view);
        if free.len() < count {
            return None;
        }
        free.shuffle(&mut rand::rng());
        // Stable: equals keep their random order.
        free.sort_by_key(|&(used, _)| used);
        Some(free.iter().take(count).map(|&(_, port)| port).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(everywhere: &[u16], on_one_node: &[u16]) -> PortUse {
        PortUse {
            everywhere: everywhere.to_vec(),
            on_one_node: on_one_node.to_vec(),
        }
    }

    #[test]
    fn picks_distinct_free_ports_in_range() {
        let picker = PortPicker::new(31001, 31010);
        picker.replace(&held(&[31001, 31002], &[31003]), 1);
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
        let picker = PortPicker::new(31001, 31003);
        picker.replace(&held(&[], &[31001, 31002, 31003]), 1);
        assert_eq!(picker.pick(1, &HashSet::new()), None);
        picker.mark_free([31002]);
        assert_eq!(picker.pick(1, &HashSet::new()), Some(vec![31002]));
        assert_eq!(picker.pick(2, &HashSet::new()), None);
    }

    #[test]
    fn host_ports_take_one_slot_per_node_and_the_least_used_goes_first() {
        // 3 nodes: a port is full once 3 pods hold it; a service's port is full at once.
        let picker = PortPicker::new(31001, 31004);
        picker.replace(&held(&[31004], &[31001, 31001, 31001, 31002, 31002, 31003]), 3);
        assert_eq!(picker.pick(1, &HashSet::new()), Some(vec![31003]));
        assert_eq!(picker.pick(2, &HashSet::new()), Some(vec![31003, 31002]));
        assert_eq!(picker.pick(3, &HashSet::new()), None);
        picker.mark_used([31003, 31003]);
        assert_eq!(picker.pick(1, &HashSet::new()), Some(vec![31002]));
        picker.mark_free([31003]);
        picker.mark_full([31002]);
        assert_eq!(picker.pick(1, &HashSet::new()), Some(vec![31003]));
        picker.mark_used([31003]);
        assert_eq!(picker.pick(1, &HashSet::new()), None);
    }

    #[test]
    fn staleness_follows_refresh() {
        let picker = PortPicker::new(31001, 31003);
        assert!(picker.is_stale());
        picker.replace(&PortUse::default(), 1);
        assert!(!picker.is_stale());
    }

    #[test]
    fn concurrent_creators_rarely_collide_at_ninety_percent() {
        // 32 creators with the same (fresh) view of a 90%-full range draw at once.
        let picker = PortPicker::new(31001, 32767);
        let used: Vec<u16> = (31001..=32767).filter(|p| p % 10 != 0).collect();
        picker.replace(&held(&used, &[]), 1);
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
