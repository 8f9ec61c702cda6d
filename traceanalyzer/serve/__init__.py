"""The service (`traceanalyzer serve`): uploads in, durable analysis jobs, reports out over HTTP.

    app.py      routes: JSON API and the server-rendered pages beside it
    store.py    the database (SQLAlchemy Core; SQLite in DATA by default or PostgreSQL), migrated by Alembic
    body.py     an upload request's body as it arrives: the file itself, or multipart parts
    uploads.py  streamed, size-limited, content-addressed files; archive checks and bounded unpacking
    jobs.py     queued -> running -> done | failed, in worker threads each running one limited process
    history.py  each run's figures, a branch's series and change points, a run against a branch's last runs
    settings.py the options of `traceanalyzer serve`, in one frozen value

Every page is read from stored results (the saved Analysis JSON and what was rendered from it when the
job finished); nothing is re-analysed to show a page. Needs `pip install 'traceanalyzer-ml[serve]'`.
"""
