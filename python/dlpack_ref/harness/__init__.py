"""What ``dlpack-ref check`` and ``dlpack-ref bench`` stand on.

Modules, each with one job:

``subject``
    A library under check or benchmark: Producer, Consumer, CudaProducer,
    Subject, and how a consumer asks a producer for a capsule.
``libraries``
    One file per known library (its adapter, which is also what its
    reproductions print), and ``generic`` for any other module.
``registry``
    The known libraries, which are installed, a spec's Subject and version,
    the one selection of libraries both commands make.
``runner``
    The child-process runner: every call into a library runs in a child.
``outcome``
    How a task ended without an answer (a crash, a hang, an error), typed,
    and the one pair of functions that write it to the pipe and read it.
``processes``
    The processes of a run and the signals that stop it: sessions, marks,
    the reaper, SIGINT and SIGTERM.
``exchange``
    One exchange judged by pointer and values (the check's matrix, the
    bench's pre-flight).
``output``
    The report conventions: stdout is the report alone, progress on stderr,
    exit statuses, paths checked before a run, tables.
``bundle``
    Self-contained Python from the definitions the checker runs, cut to
    what a rule's code reaches (the reproductions).
``observe``
    An exception's name, a short message, values compared.

Importing this package imports none of them.
"""
