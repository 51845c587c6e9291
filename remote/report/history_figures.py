"""Figures over a window from the history store, for the report: a series' lowest, median and
highest, how long it stayed under a line, and its last sample with its time. (A run's first
and last step and loss are its records', stepstore.logged_range: a bucket's mean is no step.) One query per series
name (every job's series at once), at a resolution that keeps a week in about a thousand points."""

POINTS_PER_WINDOW = 1000


def resolution_for(start, end):
    return max(10.0, (end - start) / POINTS_PER_WINDOW)


def by_job(store, source, name, start, end, label="job"):
    """{label value: [[t, min, mean, max], ...]} of every series of `name` over [start, end)."""
    series, _ = store.query(source, name, start=start, end=end, resolution_s=resolution_for(start, end))
    found = {}
    for entry in series:
        key = (entry.get("labels") or {}).get(label)
        if key is not None and entry.get("points"):
            found.setdefault(key, []).extend(entry["points"])
    return found


def over_runs(store, source, name, runs):
    """{job id: points} of each job's own series over its own span ({job id: (start, end)}): a job
    that ran an hour of the week reads that hour, not the week of every job's series."""
    found = {}
    for job_id, (start, end) in runs.items():
        if end > start:
            series, _ = store.query(source, name, labels={"job": job_id}, start=start, end=end, resolution_s=resolution_for(start, end))
            points = [p for entry in series for p in entry.get("points") or []]
            if points:
                found[job_id] = points
    return found


def last_sample(store, source, name, labels, last_point, end):
    """(time, value) of a series' last sample before `end`: its last bucket (`last_point`, [t,
    min, mean, max], whose start and mean are not the sample's time and value) read again at a
    finer resolution, narrowed to the last finer bucket until a query answers single samples."""
    start, found = last_point[0], (last_point[0], last_point[2])
    for _ in range(4):
        series, resolution = store.query(source, name, labels=labels, start=start, end=end, resolution_s=0.001)
        points = [p for entry in series for p in entry.get("points") or []]
        if not points:
            break
        latest = max(points, key=lambda p: p[0])
        found = (latest[0], latest[2])
        if resolution <= 0.01 or latest[0] + resolution >= end and start == latest[0]:
            break
        start, end = latest[0], min(end, latest[0] + resolution)
    return found


def spread(points):
    """{min, median, max, mean} of a series (min and max from the buckets' own, so a spike shows)."""
    if not points:
        return None
    means = sorted(p[2] for p in points)
    middle = len(means) // 2
    median = means[middle] if len(means) % 2 else (means[middle - 1] + means[middle]) / 2
    return {"min": min(p[1] for p in points), "median": median, "max": max(p[3] for p in points),
            "mean": sum(means) / len(means)}


def time_under(points, line, step_s, end):
    """Seconds the series' mean spent under `line`: each point counts until the next (at most
    `step_s` past the last, and never past `end`), so a gap in the record is not counted."""
    total = 0.0
    for index, point in enumerate(points):
        if point[2] >= line:
            continue
        following = points[index + 1][0] if index + 1 < len(points) else end
        total += max(0.0, min(following - point[0], step_s, end - point[0]))
    return total
