//! Where a run's CPU went, on Linux: the machine's busy and idle time from `/proc/stat`,
//! this process's own time (an in-process worker's threads) and that of its children that
//! ended meanwhile (pgbench) from `/proc/self/stat`. Both count in the kernel's clock ticks
//! for user space (`USER_HZ`, 100 a second on Linux), so that shares are exact to a tick and
//! times are ticks over 100.
//!
//! On a machine a run saturates, a client that takes a share of each job's CPU leaves the
//! server that much less: the worker's share beside pgbench's says how far the worker can
//! come to the ceiling at the same server work ([`CpuSplit::own_share`]).

/// Clock ticks a second in `/proc` (`USER_HZ`).
const TICKS_PER_S: f64 = 100.0;

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    machine_busy: u64,
    machine_total: u64,
    own: u64,
    children: u64,
}

/// The CPU of the time between two [`Sample`]s.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CpuSplit {
    /// CPU seconds the machine spent busy, all cores together (user, system, interrupts,
    /// steal; idle and I/O wait left out).
    pub machine_busy_s: f64,
    /// The share of the machine's cores that was busy, 0 to 1.
    pub machine_busy_share: f64,
    /// CPU seconds of this process: an in-process worker, with the bench's own waiting.
    pub own_s: f64,
    /// CPU seconds of this process's children that ended meanwhile: pgbench.
    pub children_s: f64,
}

impl CpuSplit {
    /// This process's share of the machine's busy CPU, 0 to 1 (0 when the machine was not
    /// seen busy).
    pub fn own_share(&self) -> f64 {
        share(self.own_s, self.machine_busy_s)
    }

    /// The children's share of the machine's busy CPU, 0 to 1.
    pub fn children_share(&self) -> f64 {
        share(self.children_s, self.machine_busy_s)
    }
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (part / whole).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

impl Sample {
    /// The counters now; `None` where `/proc` cannot be read (not Linux).
    pub fn now() -> Option<Sample> {
        let (machine_busy, machine_total) = machine(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let (own, children) = process(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some(Sample {
            machine_busy,
            machine_total,
            own,
            children,
        })
    }

    /// The CPU from `earlier` to this sample; `None` if a counter went back (a sample of
    /// another machine or process).
    pub fn since(&self, earlier: &Sample) -> Option<CpuSplit> {
        let busy = self.machine_busy.checked_sub(earlier.machine_busy)?;
        let total = self.machine_total.checked_sub(earlier.machine_total)?;
        let own = self.own.checked_sub(earlier.own)?;
        let children = self.children.checked_sub(earlier.children)?;
        let s = |ticks: u64| ticks as f64 / TICKS_PER_S;
        Some(CpuSplit {
            machine_busy_s: s(busy),
            machine_busy_share: share(s(busy), s(total)),
            own_s: s(own),
            children_s: s(children),
        })
    }
}

/// The machine's busy and total ticks from `/proc/stat`'s first line (`cpu  user nice system
/// idle iowait irq softirq steal guest guest_nice`; guest time is already in user time).
fn machine(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
        return None;
    };
    let busy = user + nice + system + irq + softirq + steal;
    Some((busy, busy + idle + iowait))
}

/// This process's own ticks (user and system) and its waited-for children's, from
/// `/proc/self/stat` (fields 14 to 17, counted after the parenthesised command name, which
/// may itself hold spaces and parentheses).
fn process(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    let n = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some((n(14)? + n(15)?, n(16)? + n(17)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_counts_idle_and_io_wait_as_not_busy() {
        let stat = "cpu  100 5 20 300 40 1 2 3 7 0\ncpu0 50 2 10 150 20 0 1 1 0 0\n";
        assert_eq!(machine(stat), Some((131, 471)));
        assert_eq!(machine("intr 1 2 3\n"), None);
        assert_eq!(machine("cpu 1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "4242 (my (odd) prog) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18";
        // utime 11 + stime 12, cutime 13 + cstime 14 (fields 14 to 17).
        assert_eq!(process(stat), Some((23, 27)));
        assert_eq!(process("4242 (short) S 1 2"), None);
    }

    #[test]
    fn a_process_that_burns_cpu_sees_it_as_its_own_and_as_the_machines() {
        let Some(start) = Sample::now() else {
            // Not Linux: nothing to measure.
            return;
        };
        // Spin until this process has used 300 ms of CPU by its own counter, then compare.
        let mut x = 0u64;
        let split = loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = Sample::now().expect("a second sample of /proc");
            let split = now.since(&start).expect("counters only grow");
            if split.own_s >= 0.3 {
                break split;
            }
        };
        assert!(split.machine_busy_s + 0.02 >= split.own_s, "{split:?}");
        assert!(
            split.own_share() > 0.0 && split.own_share() <= 1.0,
            "{split:?}"
        );
        // The negative control: the same samples the other way round are refused.
        let later = Sample::now().expect("a third sample");
        assert_eq!(start.since(&later), None);
    }
}
