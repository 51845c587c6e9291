"""squeue's rows as the agent reads them: a job's name, which its owner (or anyone who can name a
job of this user) chooses, cannot make rows of its own nor change another job's state."""

from remote.slurm import commands


def squeue_output(rows, marker):
    """What `squeue --Format` prints for queue_argv(user, marker): each field with `|` after it,
    the last with `|@marker`, one row a line."""
    return "".join("|".join(row) + "|@" + marker + "\n" for row in rows)


def row(job_id, state, name):
    return [job_id, state, "None", "n1", "0", "debug", "2026-01-01T00:00:00", "2026-01-01T00:00:01", "N/A", "alice", name]


def test_a_job_named_with_a_forged_row_leaves_the_other_job_running():
    marker = commands.queue_marker()
    forged = "x\n" + "|".join(row("41", "COMPLETED", "real")) + "|\n"
    text = squeue_output([row("40", "RUNNING", forged), row("41", "RUNNING", "real")], marker)
    rows = commands.parse_queue(text, marker)
    assert set(rows) == {"40", "41"}
    assert rows["41"]["state"] == "RUNNING"
    assert rows["40"]["state"] == "RUNNING" and rows["40"]["name"] == forged


def test_a_row_whose_id_does_not_parse_or_is_listed_twice_is_left_out():
    marker = commands.queue_marker()
    text = squeue_output([row("junk", "COMPLETED", "a"), row("7", "RUNNING", "b"), row("7", "COMPLETED", "c"),
                          row("8", "PENDING", "d")], marker)
    assert set(commands.parse_queue(text, marker)) == {"8"}


def test_the_marker_ends_each_row_of_the_squeue_command():
    argv = commands.queue_argv("alice", "QwErTy")
    assert argv[-1].endswith("Name:|@QwErTy")
