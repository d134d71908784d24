//! `audit::writer::thread_count`, which guards the audit writer's fork, in a process of its
//! own: this test runs without libtest's harness (`harness = false`), so the process is
//! single-threaded, as the supervisor is at the fork.
//!
//! Review mode joins a thread just before the writer is forked. A joined thread can stay
//! listed in `/proc/self/task` for a moment (the kernel wakes the joiner before it unhashes the
//! thread), so a single read of the list could make the guard refuse a session. Here a thread
//! is started and joined many times, and the guard must count one thread every time. With a
//! single read this test failed (885 of 20,000 joins when measured).

fn main() {
    const JOINS: usize = 20_000;
    let mut wrong = Vec::new();
    for i in 0..JOINS {
        let t = std::thread::spawn(|| std::fs::read_dir("/usr/lib").map(Iterator::count));
        let _ = t.join();
        match vetto::audit::writer::thread_count() {
            Some(1) => {}
            other => wrong.push((i, other)),
        }
    }
    if !wrong.is_empty() {
        eprintln!(
            "thread_count after a join was not 1 in {} of {JOINS} joins (first: {:?})",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        // The line libtest prints, so the suite's tally counts this test too.
        println!("test result: FAILED. 0 passed; 1 failed; 0 ignored");
        std::process::exit(1);
    }
    println!("thread_count: 1 after each of {JOINS} joins");
    println!("test result: ok. 1 passed; 0 failed; 0 ignored");
}
