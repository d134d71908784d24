//! Keeping the audit writer off the supervisor's CPU while it starts.
//!
//! A forked child starts on its parent's CPU, and the scheduler may run it there at once, the
//! parent waiting runnable while another CPU is idle. The audit writer's start (SQLite's first
//! connection and the first append, ~1 ms of CPU) runs beside the supervisor's own work, not
//! after it. Measured on this 2-CPU machine, FS-ONLY (whose supervisor goes on building the
//! sandbox's view right after the fork): the fork took 0.12 ms in about half the runs and
//! ~1 ms in the others, 1.4-2 ms in every run after the machine idled (`perf record -e
//! sched:sched_switch`: the supervisor switched out in state R inside `fork`, the writer ran
//! 1.5 ms on its CPU); kept off the supervisor's CPU, 0.15-0.3 ms in every run.
//!
//! The writer stays off that CPU for its life (it sleeps through the session, and records the
//! end beside the supervisor's teardown). It does not take its whole affinity back once started:
//! the supervisor sets the child's affinity after the fork, and a writer whose start finished
//! before that call (a supervisor kept off its CPU for a millisecond) would have been narrowed
//! again anyway, so the end state would depend on a race.
//!
//! Not for every helper: the network broker (an exec of vetto, ~2 ms of CPU before its `main`)
//! kept off the supervisor's CPU the same way made a session with the network on 0.3-0.5 ms
//! slower (100 interleaved runs, twice). The supervisor waits in libcontainer's create while
//! the broker starts, so its CPU is the free one; the other runs the container's init.

/// The caller's affinity without the CPU it runs on now.
#[derive(Clone, Copy)]
pub struct Cpus {
    others: libc::cpu_set_t,
}

/// The size the affinity calls are given.
const SET_SIZE: usize = std::mem::size_of::<libc::cpu_set_t>();

impl Cpus {
    /// `None` when the caller may run on fewer than two CPUs (nothing to keep off), or cannot
    /// tell.
    pub fn now() -> Option<Cpus> {
        // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
        let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: fills the set we own, of the size given.
        let r = unsafe { libc::sched_getaffinity(0, SET_SIZE, &mut all) };
        // SAFETY: no arguments.
        let cpu = unsafe { libc::sched_getcpu() };
        let cpu = usize::try_from(cpu).ok()?;
        if r != 0 || cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        let mut others = all;
        // SAFETY: set operations on sets we own, with a CPU number below CPU_SETSIZE.
        let (n_all, n_others) = unsafe {
            libc::CPU_CLR(cpu, &mut others);
            (libc::CPU_COUNT(&all), libc::CPU_COUNT(&others))
        };
        (n_all >= 2 && n_others > 0).then_some(Cpus { others })
    }

    /// Keep process `pid` (0: the caller) off the CPU [`Cpus::now`] saw. Best effort: a
    /// refusal (a seccomp filter of an enclosing sandbox) only costs the time measured above.
    pub fn keep_off(&self, pid: libc::pid_t) {
        set_affinity(pid, &self.others);
    }
}

fn set_affinity(pid: libc::pid_t, set: &libc::cpu_set_t) {
    // SAFETY: reads the set we borrow, of the size given; pid is a child of ours or ourselves.
    unsafe { libc::sched_setaffinity(pid, SET_SIZE, set) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU numbers a set holds.
    fn members(set: &libc::cpu_set_t) -> impl Iterator<Item = usize> + '_ {
        // SAFETY: a CPU number below CPU_SETSIZE, in a set we borrow.
        (0..libc::CPU_SETSIZE as usize).filter(move |&c| unsafe { libc::CPU_ISSET(c, set) })
    }

    fn only(list: &[usize]) -> libc::cpu_set_t {
        // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in list {
            // SAFETY: a CPU number below CPU_SETSIZE, in a set we own.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    }

    fn mine() -> libc::cpu_set_t {
        // SAFETY: an all-zero cpu_set_t is a valid (empty) set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: fills the set we own, of the size given.
        assert_eq!(unsafe { libc::sched_getaffinity(0, SET_SIZE, &mut set) }, 0);
        set
    }

    /// The set leaves out the caller's CPU, and there is none on a single CPU; keep_off sets
    /// it. (This test thread's affinity is changed, then restored.)
    #[test]
    fn the_set_leaves_out_the_callers_cpu_and_needs_two() {
        let saved = mine();
        let cpus: Vec<usize> = members(&saved).collect();
        set_affinity(0, &only(&cpus[..1]));
        assert!(Cpus::now().is_none(), "one CPU: nothing to keep off");
        if cpus.len() >= 2 {
            let two = [cpus[0], cpus[1]];
            set_affinity(0, &only(&two));
            let c = Cpus::now().expect("two CPUs");
            let others: Vec<usize> = members(&c.others).collect();
            assert!(
                others == vec![two[0]] || others == vec![two[1]],
                "one of the two, the one not run on: {others:?}"
            );
            c.keep_off(0);
            assert_eq!(members(&mine()).collect::<Vec<_>>(), others);
        }
        set_affinity(0, &saved);
    }
}
