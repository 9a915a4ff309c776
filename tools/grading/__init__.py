"""Instructor tooling for the labs: build the releases, grade a class in a sandbox.

    build.py    otter assign every master into labs/dist (hand-out + autograder zip)
    handout.py  the hand-out's otter init cell, which works under any file name
    answers.py  read a hand-in (outside the sandbox): its code, its syntax errors,
                forbidden imports, the cases of the autograder's own table
    sandbox.py  the bubblewrap jail and its limits, one per submission
    runner.py   runs INSIDE the jail: the student's code, then the hidden tests
    grade.py    one submission (with per-case time limits) and a whole class
    report.py   scores.csv and summary.txt

The threat model is on the instructors' page of the book (book/instructors.md).
"""
