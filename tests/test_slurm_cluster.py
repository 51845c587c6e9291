"""The Slurm cluster the Slurm tests run on (tests/slurm_fixtures.py): two nodes, jobs run as
the user who submitted them, ended jobs and their exit codes kept where the engine reads them."""

from tests.helpers.waits import wait_for


def test_a_two_node_job_runs_as_its_user_on_both_nodes(slurm_cluster, host_user):
    out = host_user.home / "cluster-check.out"
    res = slurm_cluster.run(["sbatch", "--parsable", "-N", "2", "-o", str(out), "--wrap",
                             "srun -l printenv SLURMD_NODENAME; id -un; exit 3"], user=host_user)
    slurm_id = res.stdout.strip()
    job = wait_for(lambda: slurm_cluster.job(slurm_id).get("JobState") == "FAILED" and slurm_cluster.job(slurm_id),
                   message="the job ended")
    assert job["ExitCode"] == "3:0"
    assert job["NodeList"] == "n[1-2]"
    text = out.read_text()
    assert sorted(line for line in text.splitlines() if "SLURMD_NODENAME" not in line and ": n" in line) == ["0: n1", "1: n2"]
    assert host_user.name in text.splitlines()
    completion = slurm_cluster.run(["sacct", "-c", "-n", "-X", "-P", "-j", slurm_id, "-o", "JobID,State,ExitCode"])
    assert completion.stdout.split() == ["%s|FAILED|3:0" % slurm_id]


def test_the_profile_line_reaches_the_users_login_shell(slurm_host, host_user):
    res = host_user.run(["bash", "-l", "-c", "squeue -h -o %i -u $USER; echo conf=$SLURM_CONF"])
    assert "conf=%s" % slurm_host.conf in res.stdout
