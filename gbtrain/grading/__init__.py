"""Stage 6, grading: new pages graded with a checkpoint, and the teachers' review of those grades.

- ``pages``: the pages of a folder (images, every page of every PDF), found and decoded within a memory bound.
- ``answer_key``: a teacher's answer key, the grading prompt it makes, and the question an item answers.
- ``grades``: a page's reply read into graded items, its own counts, and the page file that marks it done.
- ``documents``: an exam's pages as one document, its answer key counted once over them.
- ``tables``: grades.csv, totals.csv, questions.csv, documents.csv, students.csv and summary.json of a graded folder.
- ``threshold``: the review threshold in force (given, chosen from a checkpoint's validation table, or recorded).
- ``grade``: one grading run (eval/grade_pages.py): its options, identity, batches and overlays.
- ``review``: the review loop's shared parts: its options, the graded folder as it sees it, the teacher's view.
- ``review_export``: the sheet, Label Studio tasks and config, and page images for teachers (eval/review.py export).
- ``review_import``: the teachers' corrections read back, the reviewed pages written as data (eval/review.py import).
- ``review_report``: what the teachers changed (the re-grade rate), per item, question type and in all.
"""
