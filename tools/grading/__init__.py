"""Instructor tooling for the labs: build the releases, grade a class in a sandbox.

    build.py    otter assign every master into labs/dist (hand-out + autograder zip)
    handout.py  the hand-out's otter init cell, which works under any file name
    answers.py  read a hand-in (outside the sandbox): its code, its syntax errors,
                forbidden imports, the cases of the autograder's own table
    sandbox.py  the bubblewrap jail and its limits, two per submission
    student.py  runs INSIDE the hand-in's jail: the student's cells, then answers
                calls from the tests (its functions on the tests' inputs)
    runner.py   runs INSIDE the tests' jail: the hand-out's cells, then the tests;
                no student code runs in it
    wire*.py    what the two speak: values as data, never pickled code (wire.py
                says which file holds what; wire_code.py: fx nodes, enums, and
                mirrors of the tests' models and functions)
    feedback.py each student's page and results.json, in the hand-in's language:
                language.py (the grader's words, grading.po) and
                lab_messages.py (the tests' own words, labs/locales/.../lab_tests.po)
    labtimes.py what each lab costs: solution lines, run and grading time
    grade.py    one submission (with per-case time limits) and a whole class
    report.py   scores.csv and summary.txt

The threat model is on the instructors' page of the book (book/instructors.md).
"""
