//! Folding a `moat update` into the saved spec: what the update sets replaces what was
//! there, what it leaves out stays.

use super::{BlockIo, Cpu, Memory, Resources, ThrottleDevice};

/// `a = b` for every field of `b` that is set.
macro_rules! overlay {
    ($a:expr, $b:expr, $($f:ident),+) => {
        $( if $b.$f.is_some() { $a.$f = $b.$f.clone(); } )+
    };
}

impl Resources {
    /// Overlays an update. Device rules and RDMA are not part of an update and are kept.
    pub fn merge(&mut self, u: &Resources) {
        if let Some(m) = &u.memory {
            merge_memory(self.memory.get_or_insert_with(Memory::default), m);
        }
        if let Some(c) = &u.cpu {
            merge_cpu(self.cpu.get_or_insert_with(Cpu::default), c);
        }
        if let Some(limit) = u.pids.as_ref().and_then(|p| p.limit) {
            self.pids = Some(super::Pids { limit: Some(limit) });
        }
        if let Some(b) = &u.block_io {
            merge_block_io(self.block_io.get_or_insert_with(BlockIo::default), b);
        }
        for l in &u.hugepage_limits {
            match self
                .hugepage_limits
                .iter_mut()
                .find(|h| h.page_size == l.page_size)
            {
                Some(h) => h.limit = l.limit,
                None => self.hugepage_limits.push(l.clone()),
            }
        }
        if u.network.is_some() {
            self.network = u.network.clone();
        }
        if let Some(map) = &u.unified {
            let mine = self.unified.get_or_insert_with(Default::default);
            for (k, v) in map {
                mine.insert(k.clone(), v.clone());
            }
        }
    }
}

fn merge_memory(a: &mut Memory, b: &Memory) {
    overlay!(
        a,
        b,
        limit,
        reservation,
        swap,
        kernel,
        kernel_tcp,
        swappiness,
        disable_oom_killer,
        use_hierarchy,
        check_before_update
    );
}

fn merge_cpu(a: &mut Cpu, b: &Cpu) {
    overlay!(
        a,
        b,
        shares,
        quota,
        burst,
        period,
        realtime_runtime,
        realtime_period,
        cpus,
        mems,
        idle
    );
}

/// Per device: the update's entry replaces the old one; a rate of 0 removes the limit.
fn merge_throttle(a: &mut Vec<ThrottleDevice>, b: &[ThrottleDevice]) {
    for t in b {
        a.retain(|o| (o.major, o.minor) != (t.major, t.minor));
        if t.rate != 0 {
            a.push(t.clone());
        }
    }
}

fn merge_block_io(a: &mut BlockIo, b: &BlockIo) {
    overlay!(a, b, weight, leaf_weight);
    for w in &b.weight_device {
        match a
            .weight_device
            .iter_mut()
            .find(|o| (o.major, o.minor) == (w.major, w.minor))
        {
            Some(o) => {
                overlay!(o, w, weight, leaf_weight);
            }
            None => a.weight_device.push(w.clone()),
        }
    }
    merge_throttle(&mut a.throttle_read_bps_device, &b.throttle_read_bps_device);
    merge_throttle(
        &mut a.throttle_write_bps_device,
        &b.throttle_write_bps_device,
    );
    merge_throttle(
        &mut a.throttle_read_iops_device,
        &b.throttle_read_iops_device,
    );
    merge_throttle(
        &mut a.throttle_write_iops_device,
        &b.throttle_write_iops_device,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(json: &str) -> Resources {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn set_fields_replace_unset_fields_stay() {
        let mut r = res(r#"{"devices":[{"allow":false,"access":"rwm"}],
            "memory":{"limit":1000,"reservation":500},"cpu":{"shares":100,"cpus":"0"},
            "pids":{"limit":5},"hugepageLimits":[{"pageSize":"2MB","limit":0}],
            "blockIO":{"weight":10,"throttleReadBpsDevice":[{"major":8,"minor":0,"rate":9}]}}"#);
        r.merge(&res(r#"{"memory":{"limit":2000},"cpu":{"quota":5000},
            "hugepageLimits":[{"pageSize":"2MB","limit":4194304},{"pageSize":"1GB","limit":0}],
            "blockIO":{"throttleReadBpsDevice":[{"major":8,"minor":0,"rate":0},
                {"major":8,"minor":16,"rate":7}]},
            "unified":{"memory.high":"max"}}"#));
        let m = r.memory.as_ref().unwrap();
        assert_eq!((m.limit, m.reservation), (Some(2000), Some(500)));
        let c = r.cpu.as_ref().unwrap();
        assert_eq!(
            (c.shares, c.quota, c.cpus.as_deref()),
            (Some(100), Some(5000), Some("0"))
        );
        assert_eq!(r.pids.as_ref().unwrap().limit, Some(5));
        assert_eq!(r.devices.len(), 1);
        assert_eq!(r.hugepage_limits.len(), 2);
        assert_eq!(r.hugepage_limits[0].limit, 4194304);
        let b = r.block_io.as_ref().unwrap();
        assert_eq!(b.weight, Some(10));
        assert_eq!(b.throttle_read_bps_device.len(), 1);
        assert_eq!(b.throttle_read_bps_device[0].minor, 16);
        assert_eq!(r.unified.as_ref().unwrap()["memory.high"], "max");
    }

    #[test]
    fn merge_into_nothing() {
        let mut r = Resources::default();
        let u = res(r#"{"memory":{"limit":64},"pids":{"limit":20}}"#);
        r.merge(&u);
        assert_eq!(r, u);
    }
}
